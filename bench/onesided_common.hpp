// SPDX-License-Identifier: MIT
#pragma once
// What bench/onesided_bench.cpp (commx) and bench/onesided_mpi.cpp (MPI-3 RMA) share, so that
// both measure the same thing: seed 003's sizes, and the target's computation.

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>

namespace bench {

/// Seed 003's message sizes: 4 B, 64 B, 1 KiB.
inline constexpr std::array<std::size_t, 3> sizes{4, 64, 1024};
inline constexpr std::size_t largest_size = 1024;

/// A fixed amount of arithmetic (about 50 ms here) that touches no memory but its own
/// registers; returns the seconds it took.
inline double compute_for_a_while() {
  const auto start = std::chrono::steady_clock::now();
  volatile double sink = 0;
  double x = 1.0;
  for (long i = 0; i < 20'000'000; ++i) x = x * 1.0000001 + 1e-9;
  sink = x;
  (void)sink;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace bench
