// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The table `coll::tuned` chooses from. Regenerate it from a benchmark run with
/// `python3 scripts/tune_collectives.py bench-results.json > include/commx/coll/tuned_table.hpp`
/// (see bench/README.md); the rules below say where they came from.

#include <array>
#include <cstddef>

#include "commx/stats.hpp"

namespace commx::coll::detail {

enum class algorithm { flat, binomial, ring, hierarchical };

/// For `collective` with at least `min_ranks` ranks and at least `min_bytes` bytes per rank,
/// use `use`. Later rules override earlier ones; what no rule covers is binomial's.
struct tuning_rule {
  stats::op collective;
  int min_ranks;
  std::size_t min_bytes;
  algorithm use;
};

// Source: bench_collectives on the 2-core development VM, inproc, 2026-11-21 (see bench/README.md).
inline constexpr std::array tuned_rules{
    tuning_rule{stats::op::bcast, 1, 0, algorithm::flat},
    tuning_rule{stats::op::bcast, 4, 0, algorithm::binomial},
    tuning_rule{stats::op::reduce, 1, 0, algorithm::flat},
    tuning_rule{stats::op::reduce, 4, 0, algorithm::binomial},
    tuning_rule{stats::op::allreduce, 1, 0, algorithm::binomial},
    tuning_rule{stats::op::allreduce, 3, 65536, algorithm::ring},
    tuning_rule{stats::op::allgather, 1, 0, algorithm::binomial},
    tuning_rule{stats::op::allgather, 3, 65536, algorithm::ring},
    tuning_rule{stats::op::gather, 1, 0, algorithm::flat},
    tuning_rule{stats::op::gather, 4, 0, algorithm::binomial},
    tuning_rule{stats::op::scatter, 1, 0, algorithm::flat},
    tuning_rule{stats::op::scatter, 4, 0, algorithm::binomial},
};

}  // namespace commx::coll::detail
