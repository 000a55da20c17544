// SPDX-License-Identifier: MIT
// The 500-atom system against LAMMPS's own dumps: the lattice and the `loop geom` velocities
// at step 0, and positions and velocities after 100 steps.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>

#include "commx/communicator.hpp"
#include "commx/launch.hpp"
#include "lattice.hpp"
#include "reference_files.hpp"
#include "replicated_md.hpp"
#include "velocity_create.hpp"

namespace {

constexpr int cells = 5;
constexpr double density = 0.8442;

// Largest difference between two periodic coordinates, whichever images they are.
double periodic_distance(double a, double b, double length) {
  const double d = a - b;
  return std::abs(d - length * std::round(d / length));
}

}  // namespace

TEST_CASE("the fcc lattice is LAMMPS's, bit for bit") {
  const md::test::dump reference =
      md::test::read_dump(md::test::reference_path("dump.lj500.step0"));
  const md::system s = md::make_fcc(cells, density);
  REQUIRE(s.atoms() == reference.atoms.size());
  CHECK(s.box_length == reference.box_length);
  for (std::size_t i = 0; i < s.atoms(); ++i) {
    for (int d = 0; d < 3; ++d) {
      CAPTURE(i, d);
      CHECK(s.x[3 * i + d] == reference.atoms[i].x[d]);
    }
  }
}

TEST_CASE("loop-geom velocities are LAMMPS's to round-off") {
  const md::test::dump reference =
      md::test::read_dump(md::test::reference_path("dump.lj500.step0"));
  md::system s = md::make_fcc(cells, density);
  md::create_velocities(s, 1.44, 87287);
  double worst = 0;
  for (std::size_t i = 0; i < s.atoms(); ++i) {
    for (int d = 0; d < 3; ++d) {
      worst = std::max(worst, std::abs(s.v[3 * i + d] - reference.atoms[i].v[d]));
    }
  }
  CHECK(worst <= 1e-15);
  CHECK(md::kinetic_temperature(s) == Approx(1.44).epsilon(1e-14));
}

TEST_CASE("the generator: same position and seed, same draws; a different seed, others") {
  md::park_miller a, b, c;
  const double here[3] = {0.5, 1.25, -3.0};
  a.reset(87287, here);
  b.reset(87287, here);
  c.reset(87288, here);
  for (int k = 0; k < 10; ++k) {
    const double u = a.uniform();
    CHECK(u > 0.0);
    CHECK(u < 1.0);
    CHECK(u == b.uniform());
    CHECK(u != c.uniform());
  }
}

TEST_CASE("after 100 steps the 500-atom state is LAMMPS's dump to 1e-8") {
  const md::test::dump reference =
      md::test::read_dump(md::test::reference_path("dump.lj500.step100"));
  using comm = commx::communicator<commx::transport::inproc>;
  md::system s;
  // Catch2's assertions are for the test's thread: the rank only hands its state out.
  commx::run_inproc<comm>(1, [&](comm& world) {
    md::run_config config;
    config.cells = cells;
    md::replicated_md<comm> md(world, config);
    for (int step = 0; step < 100; ++step) md.step();
    s = md.state();
  });
  REQUIRE(s.atoms() == reference.atoms.size());
  double position_error = 0, velocity_error = 0, velocity_scale = 0;
  for (std::size_t i = 0; i < s.atoms(); ++i) {
    for (int d = 0; d < 3; ++d) {
      position_error = std::max(
          position_error, periodic_distance(s.x[3 * i + d], reference.atoms[i].x[d], s.box_length));
      velocity_error = std::max(velocity_error, std::abs(s.v[3 * i + d] - reference.atoms[i].v[d]));
      velocity_scale = std::max(velocity_scale, std::abs(reference.atoms[i].v[d]));
    }
  }
  CHECK(position_error <= 1e-8 * s.box_length);
  CHECK(velocity_error <= 1e-8 * velocity_scale);
}
