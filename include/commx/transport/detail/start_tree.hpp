// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The tree the stacks' own start-up traffic follows (the layered stacks' meeting, ucx's
/// address exchange): a binomial tree over ranks 0..N-1 rooted at rank 0, so that no rank
/// talks to more than about log2 N others while the job starts, and rank 0 in particular
/// does not talk to all of them. Connections are made on first use, so the ranks a start-up
/// talks to are the connections it leaves behind.

#include <algorithm>
#include <vector>

namespace commx::detail {

/// One rank's place in the start-up tree.
struct start_tree {
  int parent = -1;  ///< -1 at rank 0
  /// The ranks below this one, the largest subtree first.
  std::vector<int> children;
  /// The first rank past this rank's subtree: the subtree is [rank, end).
  int end = 0;
};

/// Rank `rank`'s place in the start-up tree of `size` ranks: its parent clears the lowest set
/// bit of its rank, and its subtree is the ranks up to the next multiple of that bit.
[[nodiscard]] inline start_tree start_tree_of(int rank, int size) {
  start_tree t;
  int span = 1;
  while (span < size && (rank & span) == 0) span <<= 1;
  if (rank != 0) t.parent = rank - span;
  t.end = std::min(size, rank + span);
  for (int mask = span >> 1; mask > 0; mask >>= 1) {
    if (rank + mask < size) t.children.push_back(rank + mask);
  }
  return t;
}

}  // namespace commx::detail
