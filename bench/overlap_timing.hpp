// SPDX-License-Identifier: MIT
#pragma once
// What nbc_overlap_bench.cpp and mpi_nbc_overlap_bench.cpp share: medians, the busy
// computation that stands for an application's work, and IMB-NBC's overlap figure.

#include <algorithm>
#include <chrono>
#include <vector>

namespace overlap_timing {

using steady = std::chrono::steady_clock;

inline double micros(steady::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Busy work for `us` microseconds, calling `poke` every 20 us.
template <class Poke>
void compute(double us, Poke&& poke) {
  const auto start = steady::now();
  auto next_poke = start + std::chrono::microseconds(20);
  const auto end = start + std::chrono::duration_cast<steady::duration>(
                               std::chrono::duration<double, std::micro>(us));
  for (auto now = start; now < end; now = steady::now()) {
    if (now >= next_poke) {
      poke();
      next_poke = now + std::chrono::microseconds(20);
    }
  }
}

/// The share of a collective taking `pure` that computation as long hid, when the two
/// together took `overlapped`: (pure + pure - overlapped) / pure, clamped to [0, 1].
inline double overlap(double pure, double overlapped) {
  return std::clamp((pure + pure - overlapped) / pure, 0.0, 1.0);
}

}  // namespace overlap_timing
