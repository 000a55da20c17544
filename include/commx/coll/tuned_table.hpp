// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The tables `coll::tuned` chooses from: one per stack, measured on that stack by the PMB
/// sweep and generated into coll/tuned_tables/STACK.hpp. To regenerate them all:
///
///     bash scripts/bench.sh     # the sweep, the report, results/bench/tuned_tables/*.hpp
///     cp results/bench/tuned_tables/*.hpp include/commx/coll/tuned_tables/
///
/// (or one stack: `python3 scripts/tune_collectives.py --stack shm --keep OLD RUNS...`, OLD a
/// copy of the table it replaces, whose rules above the rank counts swept it keeps).
/// A stack is chosen at compile time by the name of the transport the port runs over. A
/// layered stack ("shm+tcp", "mpi+wan") takes the table of its outermost level, the one its
/// slowest messages cross; a stack with no table of its own takes inproc's.
///
/// A table holds for the rank counts it was measured at (tuned_measured_ranks_STACK, the
/// largest); beyond them tuned chooses by the cost model (detail/cost_model.hpp) with the
/// stack's point-to-point cost below. Its rules for more ranks than the measuring machine had
/// cores (tuned_measured_cores_STACK) measured ranks taking turns on the cores: they hold where
/// the job's node is oversubscribed too (detail/node_load.hpp), and elsewhere the cost model
/// chooses from that count up.

#include <span>
#include <string_view>

#include "commx/coll/detail/cost_model.hpp"
#include "commx/coll/detail/tuning_rule.hpp"
#include "commx/coll/tuned_tables/inproc.hpp"
#include "commx/coll/tuned_tables/mpi.hpp"
#include "commx/coll/tuned_tables/shm.hpp"
#include "commx/coll/tuned_tables/tcp.hpp"
#include "commx/coll/tuned_tables/ucx.hpp"
#include "commx/coll/tuned_tables/wan.hpp"

namespace commx::coll::detail {

/// The stack named `stack` with its layered prefix dropped ("shm+tcp" is "tcp").
[[nodiscard]] constexpr std::string_view outermost_level(std::string_view stack) {
  if (const auto plus = stack.rfind('+'); plus != std::string_view::npos) {
    return stack.substr(plus + 1);
  }
  return stack;
}

/// A stack's measured table and where it was measured.
struct measured_table {
  std::span<const tuning_rule> rules;
  int ranks;  ///< the largest rank count measured
  int cores;  ///< the measuring machine's cores
};

/// The measured table for the stack named `stack` (a transport's `name`).
[[nodiscard]] constexpr measured_table tuned_table_for(std::string_view stack) {
  stack = outermost_level(stack);
  if (stack == "shm") return {tuned_rules_shm, tuned_measured_ranks_shm, tuned_measured_cores_shm};
  if (stack == "tcp") return {tuned_rules_tcp, tuned_measured_ranks_tcp, tuned_measured_cores_tcp};
  if (stack == "wan") return {tuned_rules_wan, tuned_measured_ranks_wan, tuned_measured_cores_wan};
  if (stack == "mpi") return {tuned_rules_mpi, tuned_measured_ranks_mpi, tuned_measured_cores_mpi};
  if (stack == "ucx") return {tuned_rules_ucx, tuned_measured_ranks_ucx, tuned_measured_cores_ucx};
  return {tuned_rules_inproc, tuned_measured_ranks_inproc, tuned_measured_cores_inproc};
}

/// One level's cost (the stack's own, for a stack of one level).
[[nodiscard]] constexpr link_cost link_cost_of_level(std::string_view level) {
  constexpr std::size_t shm_eager = std::size_t{32} << 10;
  constexpr std::size_t tcp_eager = std::size_t{64} << 10;
  constexpr std::size_t ucx_eager = std::size_t{8} << 10;  // UCX's rendezvous over its tcp
  if (level == "shm") return {0.101, 0.0584e-3, 0.0002, 2.5, shm_eager};
  if (level == "tcp") return {4.700, 0.1189e-3, 0.0002, 15.0, tcp_eager};
  if (level == "wan") return {4.734, 0.1365e-3, 0.0002, 15.0, tcp_eager};
  if (level == "mpi") return {0.360, 0.0759e-3};
  if (level == "ucx") return {4.304, 0.1880e-3, 0.0002, 15.0, ucx_eager};
  return {0.450, 0.0303e-3};
}

/// Each stack's point-to-point cost, C(n) = alpha + n beta, fitted by scripts/alpha_beta.py on
/// 2 ranks of this project's 2-core VM (bench/HISTORY.md, 2026-11-25): what the cost model
/// weighs rounds against bytes with; and where ranks take turns on the cores, a rank's turn
/// (link_cost::turn_us): 2.5 us on shm, 15 on tcp, wan and ucx, whose turns pass through the
/// kernel's sockets and epoll (an 8-byte allreduce by recursive doubling at 128 and 256 ranks
/// on 2 cores: 13-16 us per round and rank of a core; bench/HISTORY.md, 2026-11-29).
/// The eager limits are the stacks' defaults (COMMX_SHM_LARGE_THRESHOLD, COMMX_TCP_EAGER;
/// UCX_RNDV_THRESH's choice over UCX's tcp, as `ucx_info -e` tells); a layered stack with shm
/// inside a node has shm's, the lower. ucx's cost and table were measured over UCX's loopback
/// TCP (UCX_TLS unset, 2026-12-01): on a fabric, measure both again (bench/README.md).
[[nodiscard]] constexpr link_cost link_cost_for(std::string_view stack) {
  link_cost cost = link_cost_of_level(outermost_level(stack));
  if (stack.starts_with("shm+")) cost.eager_bytes = link_cost_of_level("shm").eager_bytes;
  return cost;
}

}  // namespace commx::coll::detail
