// SPDX-License-Identifier: MIT
// A communicator's ranks by node (coll/detail/node_layout.hpp), as coll::hierarchical reads
// them: nodes numbered by their lowest rank, each node's ranks in rank order, and whether the
// nodes hold contiguous ranges (rank order for ops that do not commute depends on it).

#include <catch2/catch.hpp>

#include <span>
#include <vector>

#include "commx/coll/detail/node_layout.hpp"

namespace {

// A port as far as node_layout::of asks: its size and each rank's node id (any ints).
struct nodes_port {
  std::vector<int> ids;
  mutable int asked = 0;
  [[nodiscard]] int size() const { return static_cast<int>(ids.size()); }
  [[nodiscard]] int node_of(int rank) const {
    ++asked;
    return ids.at(static_cast<std::size_t>(rank));
  }
};

std::vector<int> members(const commx::coll::detail::node_layout& l, int node) {
  const std::span<const int> m = l.members(node);
  return {m.begin(), m.end()};
}

}  // namespace

TEST_CASE("node_layout: interleaved nodes with arbitrary ids", "[pattern]") {
  // Ranks 0-6 on nodes 70, 5, 70, 5, 70, -3, 5: three nodes, none contiguous.
  const nodes_port port{{70, 5, 70, 5, 70, -3, 5}};
  const auto l = commx::coll::detail::node_layout::of(port);
  CHECK(port.asked == 7);  // once per rank
  CHECK(l.nodes() == 3);
  CHECK(l.leaders == std::vector<int>{0, 1, 5});
  CHECK(members(l, 0) == std::vector<int>{0, 2, 4});
  CHECK(members(l, 1) == std::vector<int>{1, 3, 6});
  CHECK(members(l, 2) == std::vector<int>{5});
  CHECK(l.node_index == std::vector<int>{0, 1, 0, 1, 0, 2, 1});
  CHECK(l.leader_of(6) == 1);
  CHECK(l.leader_of(4) == 0);
  CHECK_FALSE(l.contiguous);
}

TEST_CASE("node_layout: contiguous ranges, and one that comes back", "[pattern]") {
  const auto blocks = commx::coll::detail::node_layout::of(nodes_port{{9, 9, 9, 4, 4, 7}});
  CHECK(blocks.contiguous);
  CHECK(blocks.leaders == std::vector<int>{0, 3, 5});
  CHECK(members(blocks, 1) == std::vector<int>{3, 4});
  // Node 9 again after node 4: its ranks are not one range.
  CHECK_FALSE(commx::coll::detail::node_layout::of(nodes_port{{9, 9, 4, 9}}).contiguous);
  const auto one = commx::coll::detail::node_layout::of(nodes_port{{2, 2, 2}});
  CHECK(one.nodes() == 1);
  CHECK(one.contiguous);
  CHECK(members(one, 0) == std::vector<int>{0, 1, 2});
}
