// SPDX-License-Identifier: MIT
// The collective schedules alone: pure constexpr functions, checked at compile time where a
// fixed case says it best and exhaustively over rank counts at run time.

#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "commx/coll/detail/pattern/binomial_tree.hpp"
#include "commx/coll/detail/pattern/recursive_doubling.hpp"
#include "commx/coll/detail/pattern/ring.hpp"

using namespace commx::coll::detail::pattern;

static_assert(binomial_parent(0) == -1);
static_assert(binomial_parent(6) == 4);
static_assert(binomial_parent(5) == 4);
static_assert(binomial_children(0, 8).count == 3);
static_assert(binomial_children(0, 5).count == 3);  // 1, 2, 4
static_assert(binomial_children(4, 5).count == 0);
static_assert(binomial_children(4, 8).count == 2);  // 5, 6
static_assert(subtree_size(4, 7) == 3);
static_assert(ceil_log2(1) == 0 && ceil_log2(2) == 1 && ceil_log2(5) == 3 && ceil_log2(8) == 3);
static_assert(doubling(6).core == 4 && doubling(6).extra == 2 && doubling(6).rounds() == 2);
static_assert(doubling(6).sits_out(0) && !doubling(6).sits_out(1) && !doubling(6).sits_out(4));
static_assert(dissemination_rounds(5) == 3 && dissemination_from(0, 2, 5) == 1);

TEST_CASE("binomial trees span every rank once, with contiguous subtrees", "[pattern]") {
  for (int p = 1; p <= 70; ++p) {
    CAPTURE(p);
    std::vector<int> parent_seen(static_cast<std::size_t>(p), 0);
    int depth_max = 0;
    for (int v = 0; v < p; ++v) {
      int size = 1;
      for (int child : binomial_children(v, p)) {
        REQUIRE(binomial_parent(child) == v);
        REQUIRE(child == v + size);  // children's subtrees follow each other
        size += subtree_size(child, p);
        ++parent_seen[static_cast<std::size_t>(child)];
      }
      REQUIRE(size == subtree_size(v, p));
      int depth = 0;
      for (int u = v; u != 0; u = binomial_parent(u)) ++depth;
      depth_max = std::max(depth_max, depth);
    }
    for (int v = 1; v < p; ++v) REQUIRE(parent_seen[static_cast<std::size_t>(v)] == 1);
    REQUIRE(binomial_children(0, p).count == ceil_log2(p));
    REQUIRE(depth_max <= ceil_log2(p));
    for (int root = 0; root < p; ++root)
      for (int r = 0; r < p; ++r) REQUIRE(absolute_rank(relative_rank(r, root, p), root, p) == r);
  }
}

TEST_CASE("recursive doubling pairs every core rank and keeps rank order", "[pattern]") {
  for (int p = 1; p <= 70; ++p) {
    CAPTURE(p);
    const doubling plan(p);
    REQUIRE(plan.core + plan.extra == p);
    REQUIRE((1 << plan.rounds()) == plan.core);
    std::set<int> players;
    for (int r = 0; r < p; ++r) {
      if (plan.sits_out(r)) {
        REQUIRE(!plan.sits_out(plan.fold_partner(r)));
        continue;
      }
      const int c = plan.core_rank(r);
      REQUIRE(plan.rank_of_core(c) == r);
      REQUIRE(plan.first_of(c) <= r);
      REQUIRE(r < plan.first_of(c + 1));
      players.insert(c);
      for (int k = 0; k < plan.rounds(); ++k) {
        REQUIRE(doubling::partner(doubling::partner(c, k), k) == c);
      }
    }
    REQUIRE(static_cast<int>(players.size()) == plan.core);
    REQUIRE(plan.first_of(plan.core) == p);
  }
}

TEST_CASE("ring, dissemination and pairwise exchange partners are consistent", "[pattern]") {
  for (int p = 1; p <= 40; ++p) {
    CAPTURE(p);
    for (int r = 0; r < p; ++r) {
      REQUIRE(ring_left(ring_right(r, p), p) == r);
      for (int k = 0; k < dissemination_rounds(p); ++k) {
        REQUIRE(dissemination_from(dissemination_to(r, k, p), k, p) == r);
      }
      std::set<int> partners;
      for (int s = 1; s < p; ++s) {
        REQUIRE(exchange_from(exchange_to(r, s, p), s, p) == r);
        partners.insert(exchange_to(r, s, p));
      }
      REQUIRE(static_cast<int>(partners.size()) == p - 1);
    }
    long covered = 0;
    for (int i = 0; i < p; ++i) {
      REQUIRE(segment_begin(1000, p, i) == covered);
      covered = segment_end(1000, p, i);
    }
    REQUIRE(covered == 1000);
  }
}
