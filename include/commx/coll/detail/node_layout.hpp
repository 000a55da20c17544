// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A communicator's ranks by node, found once. coll::hierarchical's steps (within each node,
/// among the node leaders) need each rank's node and each node's ranks; asked of the port rank
/// by rank at every call, that was N node_of calls and a search of the nodes seen so far for
/// each rank: O(N x nodes) a call (a simulation of 4,096 ranks on 512 nodes making a dozen
/// hierarchical calls took 46 s of wall time, 9 s with the layout kept; bench/HISTORY.md).
/// A communicator's port keeps one with its group
/// (`p.node_layout()`, built at the first call that asks, O(N)); other ports (a sub-port, the
/// site level) have a few ranks and find theirs at each call.
///
/// Memory: 2 N + 2 nodes + 1 ints per communicator that made a hierarchical call.

#include <cstddef>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace commx::coll::detail {

/// Nodes are numbered in the order of their lowest rank: node l's leader is `leaders[l]`, and
/// its ranks, in rank order, are `members(l)`.
struct node_layout {
  std::vector<int> leaders;     ///< the lowest rank of each node, ascending
  std::vector<int> by_node;     ///< node 0's ranks, then node 1's, ...; ascending within each
  std::vector<int> node_begin;  ///< node l's ranks are by_node[node_begin[l], node_begin[l + 1])
  std::vector<int> node_index;  ///< each rank's node
  bool contiguous = true;       ///< every node holds a contiguous range of ranks

  [[nodiscard]] int nodes() const { return static_cast<int>(leaders.size()); }
  [[nodiscard]] std::span<const int> members(int node) const {
    const auto at = static_cast<std::size_t>(node);
    return std::span<const int>(by_node).subspan(
        static_cast<std::size_t>(node_begin[at]),
        static_cast<std::size_t>(node_begin[at + 1] - node_begin[at]));
  }
  /// `rank`'s node: among the node leaders, the rank of its node's leader.
  [[nodiscard]] int node_of(int rank) const { return node_index[static_cast<std::size_t>(rank)]; }
  /// The lowest rank on `rank`'s node.
  [[nodiscard]] int leader_of(int rank) const {
    return leaders[static_cast<std::size_t>(node_of(rank))];
  }

  /// Asks `p.node_of` once for each rank.
  template <class Port>
  static node_layout of(const Port& p) {
    const auto n = static_cast<std::size_t>(p.size());
    node_layout out;
    out.node_index.resize(n);
    std::unordered_map<int, int> index_of_node;  // node id -> index
    std::vector<int> counts;
    for (std::size_t r = 0; r < n; ++r) {
      const auto [at, is_new] =
          index_of_node.try_emplace(p.node_of(static_cast<int>(r)), out.nodes());
      if (is_new) {
        out.leaders.push_back(static_cast<int>(r));
        counts.push_back(0);
      }
      // Nodes hold contiguous ranges when a rank leaves its predecessor's node only for a
      // node not seen before.
      if (r > 0 && at->second != out.node_index[r - 1] && !is_new) out.contiguous = false;
      out.node_index[r] = at->second;
      ++counts[static_cast<std::size_t>(at->second)];
    }
    out.node_begin.assign(counts.size() + 1, 0);
    for (std::size_t l = 0; l < counts.size(); ++l) {
      out.node_begin[l + 1] = out.node_begin[l] + counts[l];
    }
    out.by_node.resize(n);
    std::vector<int> next(out.node_begin.begin(), out.node_begin.end() - 1);
    for (std::size_t r = 0; r < n; ++r) {
      out.by_node[static_cast<std::size_t>(next[static_cast<std::size_t>(out.node_index[r])]++)] =
          static_cast<int>(r);
    }
    return out;
  }
};

/// A port's node layout: the one its communicator keeps (`p.node_layout()`, coll_port's), or
/// one found now for a port that keeps none (a sub-port's few ranks).
template <class Port>
class layout_of_port {
 public:
  explicit layout_of_port(const Port& p) {
    if constexpr (requires { p.node_layout(); }) {
      at_ = &p.node_layout();
    } else {
      found_ = node_layout::of(p);
      at_ = &*found_;
    }
  }
  layout_of_port(const layout_of_port&) = delete;
  layout_of_port& operator=(const layout_of_port&) = delete;

  const node_layout& operator*() const { return *at_; }
  const node_layout* operator->() const { return at_; }

 private:
  std::optional<node_layout> found_;
  const node_layout* at_ = nullptr;
};

}  // namespace commx::coll::detail
