// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Binomial trees over p ranks, in ranks relative to the root (relative rank 0 is the root).
/// Node v's parent is v with its lowest set bit cleared; its children are v + 2^k for every
/// 2^k below v's lowest set bit (every 2^k < p for the root), so the root has ceil(log2 p)
/// children and the tree is at most ceil(log2 p) deep. The subtree of v holds the relative ranks
/// [v, v + subtree_size(v, p)): contiguous, which is what gather and scatter rely on.

#include <bit>

namespace commx::coll::detail::pattern {

/// `rank` relative to `root` in a group of `size`.
constexpr int relative_rank(int rank, int root, int size) { return (rank - root + size) % size; }
constexpr int absolute_rank(int relative, int root, int size) { return (relative + root) % size; }

/// The lowest set bit of v, or the first power of two >= size for the root.
constexpr int subtree_span(int v, int size) {
  if (v == 0) return static_cast<int>(std::bit_ceil(static_cast<unsigned>(size)));
  return v & -v;
}

/// -1 for the root.
constexpr int binomial_parent(int v) { return v == 0 ? -1 : v - (v & -v); }

/// Number of ranks in v's subtree, v included.
constexpr int subtree_size(int v, int size) {
  const int end = v + subtree_span(v, size);
  return (end < size ? end : size) - v;
}

/// Children in increasing order of distance (and so of relative rank): child i is
/// parent + 2^i. Computed as they are asked for, not stored: an array of them, zeroed on every
/// call, cost a 2-rank broadcast 40% of its time.
struct children {
  int parent = 0;
  int count = 0;

  [[nodiscard]] static constexpr int child(int parent, int i) { return parent + (1 << i); }
  [[nodiscard]] constexpr int operator[](int i) const { return child(parent, i); }

  struct iterator {
    int parent;
    int i;
    constexpr int operator*() const { return child(parent, i); }
    constexpr iterator& operator++() {
      ++i;
      return *this;
    }
    constexpr bool operator!=(const iterator& other) const { return i != other.i; }
  };
  [[nodiscard]] constexpr iterator begin() const { return {parent, 0}; }
  [[nodiscard]] constexpr iterator end() const { return {parent, count}; }
};

constexpr children binomial_children(int v, int size) {
  children result{v, 0};
  for (int mask = 1; mask < subtree_span(v, size) && v + mask < size; mask <<= 1) ++result.count;
  return result;
}

/// ceil(log2 size): the rounds of a binomial tree, the messages its root sends in a bcast.
constexpr int ceil_log2(int size) {
  return size <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(size - 1)));
}

}  // namespace commx::coll::detail::pattern
