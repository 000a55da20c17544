// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One rule of `coll::tuned`'s measured tables (coll/tuned_tables/STACK.hpp).

#include <array>
#include <cstddef>
#include <span>

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

/// A table's rules of each collective, found once at compile time, so that a call looks only
/// at its own collective's few rules. A table lists each collective's rules together, in
/// order (the generator sorts them; `grouped_by_collective` checks).
using rules_by_collective = std::array<std::span<const tuning_rule>, stats::op_count>;

[[nodiscard]] constexpr bool grouped_by_collective(std::span<const tuning_rule> rules) {
  for (std::size_t i = 1; i < rules.size(); ++i) {
    if (rules[i].collective == rules[i - 1].collective) continue;
    for (std::size_t j = 0; j + 1 < i; ++j) {
      if (rules[j].collective == rules[i].collective) return false;  // a second run of it
    }
  }
  return true;
}

[[nodiscard]] constexpr rules_by_collective index_by_collective(
    std::span<const tuning_rule> rules) {
  rules_by_collective index{};
  for (std::size_t first = 0; first < rules.size();) {
    std::size_t end = first;
    while (end < rules.size() && rules[end].collective == rules[first].collective) ++end;
    index[static_cast<std::size_t>(rules[first].collective)] = rules.subspan(first, end - first);
    first = end;
  }
  return index;
}

}  // namespace commx::coll::detail
