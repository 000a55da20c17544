// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The Pallas/IMB benchmark set (seed 002) as both bench drivers run it, so that commx and raw
/// MPI are measured on the same sizes with the same repetition counts and names.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

namespace pmb {

/// Bytes per rank: 0 B to 4 MiB.
inline constexpr std::array<std::size_t, 7> sizes{0, 8, 1024, 16384, 65536, 1048576, 4194304};

inline constexpr std::array<std::string_view, 12> collectives{
    "PingPong",       "PingPing",  "Sendrecv",   "Exchange", "Allreduce", "Reduce",
    "Reduce_scatter", "Allgather", "Allgatherv", "Alltoall", "Bcast",     "Barrier"};

/// The point-to-point patterns run on 2 ranks, as in IMB.
constexpr bool two_ranks_only(std::string_view name) {
  return name == "PingPong" || name == "PingPing";
}

/// Repetitions per measurement: enough to time small messages, few for large ones.
constexpr int repetitions(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(
      (std::size_t{1} << 22) / std::max<std::size_t>(bytes, 4096), 5, 1000));
}

/// Rank count for the collectives: PMB_RANKS, default 4.
inline int ranks() {
  const char* text = std::getenv("PMB_RANKS");  // NOLINT(concurrency-mt-unsafe)
  return text != nullptr ? std::max(2, std::atoi(text)) : 4;
}

/// "<bench>/<stack>/np<ranks>/<bytes>", the name both drivers report.
inline std::string name(std::string_view bench, std::string_view stack, int ranks,
                        std::size_t bytes) {
  return std::string(bench) + "/" + std::string(stack) + "/np" + std::to_string(ranks) + "/" +
         std::to_string(bytes);
}

}  // namespace pmb
