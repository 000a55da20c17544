// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How the pairs are shared among ranks: contiguous atom ranges holding equal numbers of
/// half-list pairs. Atom counts would not do: in a half list, the atoms numbered last have
/// fewer partners (their neighbours across the periodic face have smaller numbers).

#include <cstddef>
#include <vector>

#include "neighbor_list.hpp"

namespace md {

/// Splits the atoms of `full` (a list over every atom) into `parts` ranges, part r ending at
/// the first atom where the running pair count reaches (r + 1) / parts of the total.
/// Deterministic, so every rank computes the same split from the same list.
[[nodiscard]] inline std::vector<atom_range> balanced_ranges(const half_neighbor_list& full,
                                                             int parts) {
  const atom_range all = full.range();
  const auto count = static_cast<std::size_t>(parts);
  std::vector<atom_range> ranges(count);
  const std::size_t total = full.pairs();
  std::size_t atom = all.first;
  for (std::size_t r = 0; r < count; ++r) {
    ranges[r].first = atom;
    if (r + 1 == count) {
      atom = all.last;
    } else {
      // Compare in integers: part r closes once pairs * parts >= (r + 1) * total.
      while (atom < all.last &&
             (full.first(atom) - full.first(all.first)) * count < (r + 1) * total) {
        ++atom;
      }
    }
    ranges[r].last = atom;
  }
  return ranges;
}

}  // namespace md
