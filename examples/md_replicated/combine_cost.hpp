// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What adding one rank's force buffer into another's costs on this machine: the local work
/// inside every allreduce, which the latency/bandwidth model of a message leaves out.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace md {

/// Seconds for `out[k] += in[k]` over `count` doubles, the fastest of a few tries (warm
/// caches, as right after the force loop).
[[nodiscard]] inline double measure_combine_seconds(std::size_t count) {
  std::vector<double> in(count, 1.0), out(count, 2.0);
  double best = 1e300;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < count; ++k) out[k] += in[k];
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // Keep the sums observable, so the loop is not optimised away.
    if (out[count / 2] < 0) in[0] = out[0];
  }
  return best;
}

}  // namespace md
