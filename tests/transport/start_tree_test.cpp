// SPDX-License-Identifier: MIT
// The start-up tree (detail/start_tree.hpp) the layered stacks meet along and ucx gathers its
// addresses up: at every size up to 4,100 ranks it spans the job (each rank but 0 is the child
// of exactly one parent, which names it), a rank's subtree is the ranks [rank, end), no rank
// has more than ceil(log2 N) tree peers and no path to rank 0 is longer.

#include <catch2/catch.hpp>

#include <bit>
#include <vector>

#include "commx/transport/detail/start_tree.hpp"

TEST_CASE("the start-up tree spans the job, each subtree contiguous, log2 N peers at most") {
  using commx::detail::start_tree_of;
  for (int n = 1; n <= 4100; n += (n < 70 ? 1 : 127)) {
    const int bound = static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1)));  // ceil log2
    std::vector<int> parent_of(static_cast<std::size_t>(n), -2);
    std::vector<int> end_of(static_cast<std::size_t>(n), 0);
    for (int r = 0; r < n; ++r) {
      const auto t = start_tree_of(r, n);
      end_of[static_cast<std::size_t>(r)] = t.end;
      CHECK((r == 0) == (t.parent < 0));
      CHECK(static_cast<int>(t.children.size()) + (t.parent >= 0 ? 1 : 0) <= bound);
      for (const int c : t.children) {
        REQUIRE(c > r);
        REQUIRE(c < n);
        CHECK(parent_of[static_cast<std::size_t>(c)] == -2);  // named by one parent only
        parent_of[static_cast<std::size_t>(c)] = r;
      }
    }
    for (int r = 1; r < n; ++r) {
      const auto t = start_tree_of(r, n);
      CHECK(parent_of[static_cast<std::size_t>(r)] == t.parent);
      // The subtree is [r, end): the children's subtrees tile it after r.
      int next = r + 1;
      for (auto it = t.children.rbegin(); it != t.children.rend(); ++it) {
        CHECK(*it == next);
        next = end_of[static_cast<std::size_t>(*it)];
      }
      CHECK(next == t.end);
      int depth = 0;
      for (int a = r; a != 0; a = parent_of[static_cast<std::size_t>(a)]) ++depth;
      CHECK(depth <= bound);
    }
    CHECK(start_tree_of(0, n).end == n);
  }
}
