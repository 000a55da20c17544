// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One rule of `coll::tuned`'s measured tables (coll/tuned_tables/STACK.hpp).

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

}  // namespace commx::coll::detail
