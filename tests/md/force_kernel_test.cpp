// SPDX-License-Identifier: MIT
// The force kernel and the neighbour list against the NIST Lennard-Jones reference
// configurations (minimum image, cutoffs 3 and 4), and against a brute-force pair loop.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "integrator.hpp"
#include "lj_force.hpp"
#include "neighbor_list.hpp"
#include "reference_files.hpp"
#include "system.hpp"

namespace {

md::system wrapped(const md::test::nist_config& config) {
  md::system s;
  s.box_length = config.box_length;
  s.x = config.x;
  s.v.assign(s.x.size(), 0.0);
  // The files hold coordinates in [-L/2, L/2); the list wants [0, L).
  for (double& coord : s.x) coord -= config.box_length * std::floor(coord / config.box_length);
  md::wrap_into_box(s);
  return s;
}

struct nist_case {
  int config;
  double cutoff;
  double energy;  // U, sum over pairs of 4 (r^-12 - r^-6), r < cutoff, no shift
  double virial;  // W, sum over pairs of r_ij . f_ij
};

// NIST's published sample results (to the digits of examples/md_replicated/reference/README.md).
constexpr nist_case nist_cases[] = {
    {1, 3.0, -4351.540195, -568.665465},  {1, 4.0, -4467.495725, -1263.883372},
    {2, 3.0, -690.004045, -568.457341},   {2, 4.0, -704.603320, -655.987561},
    {3, 3.0, -1146.667421, -1164.949651}, {3, 4.0, -1175.380567, -1337.102617},
    {4, 3.0, -16.790321, -46.249197},     {4, 4.0, -17.060453, -47.868828},
};

// The O(N^2) minimum-image loop the list must reproduce.
struct brute_force {
  std::vector<double> force;
  double energy = 0;
  double virial = 0;
  std::size_t pairs = 0;
};

brute_force all_pairs(const md::system& s, double cutoff) {
  brute_force out;
  const std::size_t n = s.atoms();
  out.force.assign(3 * n, 0.0);
  const double length = s.box_length;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      double d[3];
      double r2 = 0;
      for (int k = 0; k < 3; ++k) {
        d[k] = s.x[3 * i + k] - s.x[3 * j + k];
        d[k] -= length * std::round(d[k] / length);
        r2 += d[k] * d[k];
      }
      if (r2 >= cutoff * cutoff) continue;
      ++out.pairs;
      const double r6 = r2 * r2 * r2;
      out.energy += 4.0 / (r6 * r6) - 4.0 / r6;
      const double fpair = (48.0 / (r6 * r6) - 24.0 / r6) / r2;  // |f| / r
      out.virial += fpair * r2;
      for (int k = 0; k < 3; ++k) {
        out.force[3 * i + k] += fpair * d[k];
        out.force[3 * j + k] -= fpair * d[k];
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the force kernel reproduces NIST's energies and virials") {
  for (const nist_case& c : nist_cases) {
    CAPTURE(c.config, c.cutoff);
    const auto config = md::test::read_nist(md::test::reference_path(
        "nist/lj_sample_config_periodic" + std::to_string(c.config) + ".txt"));
    const md::system s = wrapped(config);
    md::half_neighbor_list list;
    list.build(s, c.cutoff, {0, s.atoms()});  // no skin: the list holds exactly the pairs
    std::vector<double> force(3 * s.atoms(), 0.0);
    const md::pair_tally tally = md::add_lj_forces<true>(s.x, list, c.cutoff, force);
    // NIST tabulates six decimals.
    CHECK(tally.energy == Approx(c.energy).margin(1e-6).epsilon(0));
    CHECK(tally.virial == Approx(c.virial).margin(1e-6).epsilon(0));
  }
}

TEST_CASE("the half list holds each pair once and the kernel matches a brute-force loop") {
  for (int config = 1; config <= 4; ++config) {
    for (const double cutoff : {3.0, 4.0}) {
      CAPTURE(config, cutoff);
      const md::system s = wrapped(md::test::read_nist(md::test::reference_path(
          "nist/lj_sample_config_periodic" + std::to_string(config) + ".txt")));
      const brute_force expected = all_pairs(s, cutoff);
      md::half_neighbor_list list;
      list.build(s, cutoff, {0, s.atoms()});
      CHECK(list.pairs() == expected.pairs);

      std::vector<double> force(3 * s.atoms(), 0.0);
      const md::pair_tally tally = md::add_lj_forces<true>(s.x, list, cutoff, force);
      CHECK(tally.energy == Approx(expected.energy).epsilon(1e-12));
      CHECK(tally.virial == Approx(expected.virial).epsilon(1e-12));
      double largest = 0, worst = 0, sum[3] = {0, 0, 0};
      for (std::size_t k = 0; k < force.size(); ++k) {
        largest = std::max(largest, std::abs(expected.force[k]));
        worst = std::max(worst, std::abs(force[k] - expected.force[k]));
        sum[k % 3] += force[k];
      }
      CHECK(worst <= 1e-12 * largest);
      // Newton's third law: the forces of a closed periodic system sum to zero.
      for (double component : sum) CHECK(std::abs(component) <= 1e-10 * largest);
    }
  }
}

TEST_CASE("a list split into atom ranges gives the whole list's forces") {
  const md::system s =
      wrapped(md::test::read_nist(md::test::reference_path("nist/lj_sample_config_periodic1.txt")));
  const double cutoff = 3.0;
  md::half_neighbor_list whole;
  whole.build(s, cutoff, {0, s.atoms()});
  std::vector<double> expected(3 * s.atoms(), 0.0);
  const md::pair_tally all = md::add_lj_forces<true>(s.x, whole, cutoff, expected);

  const std::size_t cuts[] = {0, 123, 124, 517, s.atoms()};  // includes an empty-ish range
  std::vector<double> summed(3 * s.atoms(), 0.0);
  md::pair_tally parts;
  std::size_t pairs = 0;
  for (std::size_t r = 0; r + 1 < std::size(cuts); ++r) {
    md::half_neighbor_list part;
    part.build(s, cutoff, {cuts[r], cuts[r + 1]});
    pairs += part.pairs();
    std::vector<double> force(3 * s.atoms(), 0.0);
    const md::pair_tally t = md::add_lj_forces<true>(s.x, part, cutoff, force);
    parts.energy += t.energy;
    parts.virial += t.virial;
    for (std::size_t k = 0; k < force.size(); ++k) summed[k] += force[k];
  }
  CHECK(pairs == whole.pairs());
  CHECK(parts.energy == Approx(all.energy).epsilon(1e-12));
  CHECK(parts.virial == Approx(all.virial).epsilon(1e-12));
  for (std::size_t k = 0; k < summed.size(); ++k) {
    CHECK(summed[k] == Approx(expected[k]).margin(1e-9));
  }
}

TEST_CASE("fixed point rounds as llrint does: to nearest, ties to even, symmetric") {
  using units = md::sum_units<std::int64_t>;
  for (const double value : {0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 3.7, -3.7,
                             123456789.25, -123456789.75, 0x1p50 + 0.5, -0x1p50 - 0.5}) {
    INFO(value);
    CHECK(units::rounded(value) == std::llrint(value));
    CHECK(units::rounded(-value) == -units::rounded(value));
  }
}

TEST_CASE("fixed-point sums have the same bits however the pairs are split, near double's") {
  // --survive's sums: a run that shares its pairs among fewer ranks after a loss must end with
  // the bits of one that did not. Doubles summed in another grouping differ in the last bits
  // (the test above allows 1e-12); fixed point must not differ at all.
  using units = md::sum_units<std::int64_t>;
  const md::system s =
      wrapped(md::test::read_nist(md::test::reference_path("nist/lj_sample_config_periodic1.txt")));
  const double cutoff = 3.0;
  md::half_neighbor_list whole;
  whole.build(s, cutoff, {0, s.atoms()});
  std::vector<std::int64_t> expected(3 * s.atoms(), 0);
  const auto all = md::add_lj_forces<true, std::int64_t>(s.x, whole, cutoff, expected);
  std::vector<double> in_double(3 * s.atoms(), 0.0);
  const md::pair_tally all_double = md::add_lj_forces<true>(s.x, whole, cutoff, in_double);

  for (const auto& cuts : {std::vector<std::size_t>{0, 123, 124, 517, s.atoms()},
                           std::vector<std::size_t>{0, 400, s.atoms()}}) {
    std::vector<std::int64_t> summed(3 * s.atoms(), 0);
    md::basic_pair_tally<std::int64_t> parts;
    // The parts added last to first: another order, as another allreduce would add them.
    for (std::size_t r = cuts.size() - 1; r-- > 0;) {
      md::half_neighbor_list part;
      part.build(s, cutoff, {cuts[r], cuts[r + 1]});
      std::vector<std::int64_t> force(3 * s.atoms(), 0);
      const auto t = md::add_lj_forces<true, std::int64_t>(s.x, part, cutoff, force);
      parts.energy += t.energy;
      parts.virial += t.virial;
      for (std::size_t k = 0; k < force.size(); ++k) summed[k] += force[k];
    }
    CHECK(parts.energy == all.energy);
    CHECK(parts.virial == all.virial);
    CHECK(summed == expected);
  }
  CHECK(units::tally_value(all.energy) == Approx(all_double.energy).epsilon(1e-12));
  CHECK(units::tally_value(all.virial) == Approx(all_double.virial).epsilon(1e-12));
  std::int64_t momentum[3] = {};
  for (std::size_t k = 0; k < expected.size(); ++k) {
    CHECK(units::force_value(expected[k]) == Approx(in_double[k]).margin(1e-10));
    momentum[k % 3] += expected[k];
  }
  // Each pair adds to one atom exactly what it takes from the other.
  for (std::int64_t component : momentum) CHECK(component == 0);
}

TEST_CASE("the list refuses a box too small for its cutoff and atoms outside the box") {
  md::system s;
  s.box_length = 5.0;
  s.x = {1.0, 1.0, 1.0, 2.0, 2.0, 2.0};
  s.v.assign(6, 0.0);
  md::half_neighbor_list list;
  CHECK_THROWS_WITH(list.build(s, 2.8, {0, 2}), Catch::Contains("twice the list cutoff"));
  s.x[4] = 5.0;  // x == L is outside [0, L)
  CHECK_THROWS_WITH(list.build(s, 2.5, {0, 2}), Catch::Contains("outside the box"));
}
