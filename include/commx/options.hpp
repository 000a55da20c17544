// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::options`: a communicator's settings, each with a default that the environment can
/// change (COMMX_TIMEOUT, COMMX_CHECKS, COMMX_REDUCTION).

#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "commx/deadline.hpp"
#include "commx/error.hpp"

namespace commx {

namespace detail {

inline clock::duration timeout_from_env(const char* text, clock::duration fallback,
                                        std::string_view variable = "COMMX_TIMEOUT") {
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0)) {
    throw error(errc::invalid_argument,
                fmt::format("{}='{}' is not a positive number of seconds", variable, text));
  }
  return clamped(std::chrono::duration<double>(seconds));
}

// Unset: none.
inline std::optional<clock::duration> suspicion_from_env() {
  const char* text = std::getenv("COMMX_SUSPECT_AFTER");  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr || *text == '\0') return std::nullopt;
  return timeout_from_env(text, {}, "COMMX_SUSPECT_AFTER");
}

}  // namespace detail

/// How much a collective checks before it moves data.
enum class check_level {
  /// Ranks, roots and buffer sizes on this rank; a count mismatch between ranks is caught
  /// where a message of the wrong size arrives, and elsewhere ends at the deadline.
  basic,
  /// Also a small allgather of every rank's call (collective, root, count, element size, op)
  /// before the data moves: any mismatch raises errc::collective_mismatch on every rank,
  /// naming the rank that differs.
  collective,
};

/// The order floating-point reductions combine in.
enum class reduction_order {
  /// Whatever the collectives policy does (fixed by the rank count, so the same on every
  /// transport, but different between policies).
  policy,
  /// Rank order, left to right, whatever the policy: reduce, allreduce, reduce_scatter, scan
  /// and exscan give the same bits on every policy and transport for one rank count, at the
  /// price of a linear reduction.
  reproducible,
};

namespace detail {

template <class Enum>
Enum enum_from_env(const char* variable, std::initializer_list<std::pair<const char*, Enum>> names,
                   Enum fallback) {
  const char* text = std::getenv(variable);  // NOLINT(concurrency-mt-unsafe): read at start-up
  if (text == nullptr || *text == '\0') return fallback;
  std::string known;
  for (const auto& [name, value] : names) {
    if (std::string_view(text) == name) return value;
    known += fmt::format(" '{}'", name);
  }
  throw error(errc::invalid_argument, fmt::format("{}='{}' is none of{}", variable, text, known));
}

}  // namespace detail

/// A communicator's settings; each default comes from the environment when it is set
/// (docs/environment.md).
struct options {
  /// How long a blocking call waits when its caller gives no deadline (COMMX_TIMEOUT seconds).
  clock::duration timeout =
      detail::timeout_from_env(std::getenv("COMMX_TIMEOUT"), std::chrono::seconds(60));
  /// COMMX_CHECKS=basic|collective.
  check_level checks = detail::enum_from_env(
      "COMMX_CHECKS", {{"basic", check_level::basic}, {"collective", check_level::collective}},
      check_level::basic);
  /// How long an agreement (agree, shrink) waits for a silent rank before it declares it lost,
  /// on a transport that can (`transport::excludes_peers`: inproc, shm, tcp, wan and the
  /// layered stacks), COMMX_SUSPECT_AFTER seconds; unset, a silent rank (stalled, or across
  /// a partition) holds the agreement until its deadline. Set it below the timeout, above the
  /// longest pause a healthy rank may take: a rank declared lost is refused by everyone. Set
  /// it alike at every rank: with it, 2 ranks on one node agree in two exchanges, not one.
  std::optional<clock::duration> suspect_after = detail::suspicion_from_env();
  /// COMMX_REDUCTION=policy|reproducible.
  reduction_order reduction = detail::enum_from_env(
      "COMMX_REDUCTION",
      {{"policy", reduction_order::policy}, {"reproducible", reduction_order::reproducible}},
      reduction_order::policy);
};

}  // namespace commx
