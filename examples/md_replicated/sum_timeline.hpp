// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// When each force sum began and ended on this rank, so that rank 0 can split the time ranks
/// spend in the allreduce into waiting for the last rank to arrive (load imbalance) and moving
/// the data once all have arrived (what the transport costs). Seed 000's send and receive
/// times mix the two; the communication model predicts only the second.
///
/// The split compares steady_clock readings of different ranks: valid when the ranks share a
/// clock (threads of one process, or processes on one Linux host: CLOCK_MONOTONIC), which is
/// how every stack runs here. Across hosts the clocks differ and the split means nothing.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace md {

class sum_timeline {
 public:
  /// Steps beyond this are not recorded (the split then covers the first ones only), so a
  /// long run does not grow memory without bound.
  static constexpr std::size_t max_steps = 1 << 16;

  void record(std::chrono::steady_clock::time_point arrive,
              std::chrono::steady_clock::time_point leave) {
    if (arrive_.size() >= max_steps) return;
    arrive_.push_back(seconds_since_epoch(arrive));
    leave_.push_back(seconds_since_epoch(leave));
  }
  /// Forgets the sums after the first `count` (steps gone back over after a loss).
  void keep_first(std::size_t count) {
    arrive_.resize(std::min(count, arrive_.size()));
    leave_.resize(arrive_.size());
  }
  void clear() {
    arrive_.clear();
    leave_.clear();
  }
  [[nodiscard]] const std::vector<double>& arrivals() const { return arrive_; }
  [[nodiscard]] const std::vector<double>& departures() const { return leave_; }

 private:
  static double seconds_since_epoch(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }
  std::vector<double> arrive_;
  std::vector<double> leave_;
};

/// Per rank, over the recorded sums: time from its own arrival to the last rank's arrival
/// (imbalance), and from the last arrival to its own departure (transfer).
struct sum_split {
  std::vector<double> imbalance;
  std::vector<double> transfer;
};

/// `arrivals` and `departures` hold `ranks` blocks of `steps` readings each, rank by rank.
[[nodiscard]] inline sum_split split_sums(const std::vector<double>& arrivals,
                                          const std::vector<double>& departures, int ranks) {
  const auto p = static_cast<std::size_t>(ranks);
  sum_split split{std::vector<double>(p, 0.0), std::vector<double>(p, 0.0)};
  if (p == 0 || arrivals.size() != departures.size() || arrivals.size() % p != 0) return split;
  const std::size_t steps = arrivals.size() / p;
  for (std::size_t s = 0; s < steps; ++s) {
    double last = arrivals[s];
    for (std::size_t r = 1; r < p; ++r) last = std::max(last, arrivals[r * steps + s]);
    for (std::size_t r = 0; r < p; ++r) {
      split.imbalance[r] += last - arrivals[r * steps + s];
      // A rank may leave before the last one arrives only by clock skew; count it as zero.
      split.transfer[r] += std::max(0.0, departures[r * steps + s] - last);
    }
  }
  return split;
}

}  // namespace md
