// SPDX-License-Identifier: MIT
// The blocks: every position has one owner, every rank gets the whole chain cells its
// short-range force needs (and no more than the widened block meets), and balancing moves the
// edges towards equal cost while keeping them in order.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

#include "decomposition.hpp"
#include "force_params.hpp"

namespace {

nbody::vec3 at_x(double x) { return {x, 0.5, 0.5}; }

}  // namespace

TEST_CASE("every position has one owner, the rank whose block holds it") {
  const nbody::force_params params;
  for (const int ranks : {1, 2, 3, 4, 7}) {
    CAPTURE(ranks);
    const nbody::decomposition d(params, ranks);
    REQUIRE(d.edges().front() == 0.0);
    REQUIRE(d.edges().back() == params.box);
    for (int i = 0; i < 1000; ++i) {
      const double x = (i + 0.5) / 1000.0 * params.box;
      const int owner = d.owner(x);
      REQUIRE(owner >= 0);
      REQUIRE(owner < ranks);
      CHECK(d.lower(owner) <= x);
      CHECK(x < d.upper(owner));
    }
  }
}

TEST_CASE("a rank needs the chain cells that meet its block widened by one cell") {
  const nbody::force_params params;  // 8 chain cells per side
  const nbody::decomposition d(params, 4);
  const double side = d.grid().cell_side();
  REQUIRE(d.grid().per_side() >= 6);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    for (int c = 0; c < d.grid().per_side(); ++c) {
      CAPTURE(c);
      const double centre = (c + 0.5) * side;
      // The cell's distance from the block, periodically.
      auto gap = [&](double lo, double hi) {
        double best = 1e300;
        for (const double shift : {-params.box, 0.0, params.box}) {
          const double a = c * side + shift;
          const double b = a + side;
          best = std::min(best, std::max({0.0, lo - b, a - hi}));
        }
        return best;
      };
      const double distance = gap(d.lower(r), d.upper(r));
      if (distance < side - 1e-12) {
        CHECK(d.needs(r, at_x(centre)));  // within one cell: needed whole
      }
      if (distance > side + 1e-12) {
        CHECK_FALSE(d.needs(r, at_x(centre)));  // farther: not sent
      }
    }
  }
}

TEST_CASE("balancing moves the edges halfway towards equal cost, in order") {
  const nbody::force_params params;
  nbody::decomposition d(params, 4);
  // All the cost in the first quarter of the box: the edges move into it.
  std::vector<double> cost(256, 0.0);
  for (std::size_t b = 0; b < 64; ++b) cost[b] = 1.0;
  const std::vector<double> before(d.edges().begin(), d.edges().end());
  d.balance(cost);
  for (int r = 1; r < 4; ++r) {
    CAPTURE(r);
    const double target = 0.25 * r / 4;  // the quantile of the cost
    CHECK(std::abs(d.lower(r) - 0.5 * (before[static_cast<std::size_t>(r)] + target)) < 1e-9);
    CHECK(d.lower(r) > d.lower(r - 1));
  }
  // Again and again: the edges converge to the quantiles, and stay in order.
  for (int i = 0; i < 40; ++i) d.balance(cost);
  for (int r = 1; r < 4; ++r) CHECK(std::abs(d.lower(r) - 0.25 * r / 4) < 1e-6);
  // No cost at all: nothing moves.
  const std::vector<double> settled(d.edges().begin(), d.edges().end());
  d.balance(std::vector<double>(256, 0.0));
  CHECK(std::vector<double>(d.edges().begin(), d.edges().end()) == settled);
}

TEST_CASE("balancing on one bin keeps every block non-empty") {
  const nbody::force_params params;
  nbody::decomposition d(params, 5);
  std::vector<double> cost(256, 0.0);
  cost[100] = 1.0;
  for (int i = 0; i < 60; ++i) d.balance(cost);
  for (int r = 0; r < 5; ++r) {
    CAPTURE(r);
    CHECK(d.upper(r) > d.lower(r));
  }
}
