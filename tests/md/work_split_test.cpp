// SPDX-License-Identifier: MIT
// How the work is shared and how the force sum's time is split: balanced pair ranges, and the
// imbalance/transfer split of the allreduce computed from per-rank timelines.

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "lattice.hpp"
#include "neighbor_list.hpp"
#include "sum_timeline.hpp"
#include "work_split.hpp"

TEST_CASE("balanced ranges cover every atom once and share the pairs evenly") {
  const md::system s = md::make_fcc(6, 0.8442);  // 864 atoms
  md::half_neighbor_list full;
  full.build(s, 2.8, {0, s.atoms()});
  for (const int parts : {1, 2, 3, 4, 7}) {
    CAPTURE(parts);
    const auto ranges = md::balanced_ranges(full, parts);
    REQUIRE(ranges.size() == static_cast<std::size_t>(parts));
    CHECK(ranges.front().first == 0);
    CHECK(ranges.back().last == s.atoms());
    std::size_t most_per_atom = 0;
    for (std::size_t i = 0; i < s.atoms(); ++i) {
      most_per_atom = std::max(most_per_atom, full.first(i + 1) - full.first(i));
    }
    const double share = static_cast<double>(full.pairs()) / parts;
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      if (r > 0) CHECK(ranges[r].first == ranges[r - 1].last);
      const auto pairs =
          static_cast<double>(full.first(ranges[r].last) - full.first(ranges[r].first));
      // A range can be off by at most one atom's pairs at each end.
      CHECK(std::abs(pairs - share) <= 2.0 * static_cast<double>(most_per_atom));
    }
  }
}

TEST_CASE("the force sum's time splits into waiting for the last rank and the transfer") {
  // Two sums on three ranks: rank r arrives at the times below and leaves at the departures.
  // Sum 0: the last arrival is rank 2 at 5.0; sum 1: rank 0 at 12.0.
  const std::vector<double> arrivals = {1.0, 12.0, /*rank 1*/ 3.0, 10.0, /*rank 2*/ 5.0, 11.0};
  const std::vector<double> departures = {6.0, 13.0, /*rank 1*/ 6.5, 12.5, /*rank 2*/ 7.0, 14.0};
  const md::sum_split split = md::split_sums(arrivals, departures, 3);
  REQUIRE(split.imbalance.size() == 3);
  CHECK(split.imbalance[0] == Approx(4.0 + 0.0));
  CHECK(split.imbalance[1] == Approx(2.0 + 2.0));
  CHECK(split.imbalance[2] == Approx(0.0 + 1.0));
  CHECK(split.transfer[0] == Approx(1.0 + 1.0));
  CHECK(split.transfer[1] == Approx(1.5 + 0.5));
  CHECK(split.transfer[2] == Approx(2.0 + 2.0));
}

TEST_CASE("mismatched timelines give an empty split rather than reading out of bounds") {
  const md::sum_split split = md::split_sums({1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}, 2);
  CHECK(split.imbalance == std::vector<double>{0.0, 0.0});
  CHECK(split.transfer == std::vector<double>{0.0, 0.0});
}
