// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Stats policies: what a communicator counts. `stats::none` costs nothing (every hook is an
/// empty inline function and the communicator never reads a clock for it); `stats::counting`
/// keeps, per rank and per operation kind, calls, messages and bytes each way, and the time
/// spent sending, waiting and in collectives.
///
/// A collective's own messages are counted under the collective's kind, so a test can assert
/// e.g. that a flat bcast's root sent p-1 messages. Send time is time spent posting or
/// completing sends; wait time is time blocked for receives and completions (seed 000's send
/// and receive columns); collective time is the whole of each collective call.
///
/// Thread safety: a stats object belongs to one rank and is used by that rank's thread.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace commx::stats {

/// The kinds of operation a stats policy tells apart.
enum class op : std::uint8_t {
  send,
  recv,
  isend,
  irecv,
  sendrecv,
  probe,
  barrier,
  bcast,
  reduce,
  allreduce,
  gather,
  gatherv,
  scatter,
  scatterv,
  allgather,
  allgatherv,
  alltoall,
  alltoallv,
  reduce_scatter,
  scan,
  exscan,
  split,
};
inline constexpr std::size_t op_count = static_cast<std::size_t>(op::split) + 1;

[[nodiscard]] constexpr std::string_view name(op kind) {
  constexpr std::array<std::string_view, op_count> names{
      "send",           "recv",     "isend",     "irecv",      "sendrecv", "probe",
      "barrier",        "bcast",    "reduce",    "allreduce",  "gather",   "gatherv",
      "scatter",        "scatterv", "allgather", "allgatherv", "alltoall", "alltoallv",
      "reduce_scatter", "scan",     "exscan",    "split"};
  return names[static_cast<std::size_t>(kind)];
}

[[nodiscard]] constexpr bool is_collective(op kind) {
  return kind >= op::barrier && kind <= op::split;
}

/// What a stats policy must provide. `enabled == false` promises every hook is a no-op, so the
/// communicator skips clock reads entirely.
template <class S>
concept policy = requires(S& s, op kind, std::size_t bytes, double seconds) {
  { S::enabled } -> std::convertible_to<bool>;
  s.on_call(kind);
  s.on_sent(kind, bytes);
  s.on_received(kind, bytes);
  s.add_send_time(kind, seconds);
  s.add_wait_time(kind, seconds);
  s.add_collective_time(kind, seconds);
};

/// Counts nothing and costs nothing.
struct none {
  static constexpr bool enabled = false;
  constexpr void on_call(op /*kind*/) noexcept {}
  constexpr void on_sent(op /*kind*/, std::size_t /*bytes*/) noexcept {}
  constexpr void on_received(op /*kind*/, std::size_t /*bytes*/) noexcept {}
  constexpr void add_send_time(op /*kind*/, double /*seconds*/) noexcept {}
  constexpr void add_wait_time(op /*kind*/, double /*seconds*/) noexcept {}
  constexpr void add_collective_time(op /*kind*/, double /*seconds*/) noexcept {}
};

/// One operation kind's counters.
struct counters {
  std::uint64_t calls = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  double send_seconds = 0;
  double wait_seconds = 0;
  double collective_seconds = 0;

  counters& operator+=(const counters& other) {
    calls += other.calls;
    messages_sent += other.messages_sent;
    bytes_sent += other.bytes_sent;
    messages_received += other.messages_received;
    bytes_received += other.bytes_received;
    send_seconds += other.send_seconds;
    wait_seconds += other.wait_seconds;
    collective_seconds += other.collective_seconds;
    return *this;
  }
};

/// Counts calls, messages, bytes and time per operation kind.
class counting {
 public:
  static constexpr bool enabled = true;

  void on_call(op kind) noexcept { at(kind).calls += 1; }
  void on_sent(op kind, std::size_t bytes) noexcept {
    at(kind).messages_sent += 1;
    at(kind).bytes_sent += bytes;
  }
  void on_received(op kind, std::size_t bytes) noexcept {
    at(kind).messages_received += 1;
    at(kind).bytes_received += bytes;
  }
  void add_send_time(op kind, double seconds) noexcept { at(kind).send_seconds += seconds; }
  void add_wait_time(op kind, double seconds) noexcept { at(kind).wait_seconds += seconds; }
  void add_collective_time(op kind, double seconds) noexcept {
    at(kind).collective_seconds += seconds;
  }

  [[nodiscard]] const counters& of(op kind) const noexcept {
    return per_op_[static_cast<std::size_t>(kind)];
  }

  /// The sum over every operation kind.
  [[nodiscard]] counters total() const noexcept {
    counters sum;
    for (const auto& c : per_op_) sum += c;
    return sum;
  }

  void reset() noexcept { per_op_ = {}; }

  /// A table of the non-zero rows, one per operation kind, for people to read.
  [[nodiscard]] std::string report() const {
    std::string text = fmt::format(
        "{:<14} {:>8} {:>10} {:>12} {:>10} {:>12} {:>10} {:>10} {:>10}\n", "op", "calls",
        "msgs out", "bytes out", "msgs in", "bytes in", "send s", "wait s", "coll s");
    for (std::size_t i = 0; i < op_count; ++i) {
      const counters& c = per_op_[i];
      if (c.calls == 0 && c.messages_sent == 0 && c.messages_received == 0) continue;
      text += fmt::format(
          "{:<14} {:>8} {:>10} {:>12} {:>10} {:>12} {:>10.6f} {:>10.6f} {:>10.6f}\n",
          name(static_cast<op>(i)), c.calls, c.messages_sent, c.bytes_sent, c.messages_received,
          c.bytes_received, c.send_seconds, c.wait_seconds, c.collective_seconds);
    }
    return text;
  }

 private:
  counters& at(op kind) noexcept { return per_op_[static_cast<std::size_t>(kind)]; }

  std::array<counters, op_count> per_op_{};
};

static_assert(policy<none>);
static_assert(policy<counting>);

}  // namespace commx::stats
