// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The tables `coll::tuned` chooses from: one per stack, measured on that stack by the PMB
/// sweep and generated into coll/tuned_tables/STACK.hpp. To regenerate them all:
///
///     bash scripts/bench.sh     # the sweep, the report, results/bench/tuned_tables/*.hpp
///     cp results/bench/tuned_tables/*.hpp include/commx/coll/tuned_tables/
///
/// (or one stack: `python3 scripts/tune_collectives.py --stack shm results/bench/round*/shm-np*.json`).
/// A stack is chosen at compile time by the name of the transport the port runs over. A
/// layered stack ("shm+tcp", "mpi+wan") takes the table of its outermost level, the one its
/// slowest messages cross; a stack with no table of its own takes inproc's.

#include <span>
#include <string_view>

#include "commx/coll/detail/tuning_rule.hpp"
#include "commx/coll/tuned_tables/inproc.hpp"
#include "commx/coll/tuned_tables/mpi.hpp"
#include "commx/coll/tuned_tables/shm.hpp"
#include "commx/coll/tuned_tables/tcp.hpp"
#include "commx/coll/tuned_tables/wan.hpp"

namespace commx::coll::detail {

/// The measured table for the stack named `stack` (a transport's `name`).
[[nodiscard]] constexpr std::span<const tuning_rule> tuned_rules_for(std::string_view stack) {
  if (const auto plus = stack.rfind('+'); plus != std::string_view::npos) {
    stack = stack.substr(plus + 1);
  }
  if (stack == "shm") return tuned_rules_shm;
  if (stack == "tcp") return tuned_rules_tcp;
  if (stack == "wan") return tuned_rules_wan;
  if (stack == "mpi") return tuned_rules_mpi;
  return tuned_rules_inproc;
}

}  // namespace commx::coll::detail
