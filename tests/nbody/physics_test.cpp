// SPDX-License-Identifier: MIT
// The N-body physics on its own: TreePM against Ewald summation, the Ewald reference against
// Newton, the short-range tree's and the mass mesh's independence of how particles are spread
// over ranks, energy conservation of kick-drift-kick, snapshots and parameter checks.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ewald.hpp"
#include "force_params.hpp"
#include "initial_conditions.hpp"
#include "pm_mesh.hpp"
#include "short_range_tree.hpp"
#include "snapshot.hpp"
#include "treepm.hpp"

namespace {

using Catch::Matchers::Contains;
using nbody::particle;
using nbody::vec3;

double norm2(const vec3& v) { return v[0] * v[0] + v[1] * v[1] + v[2] * v[2]; }

// sqrt(mean(|a - a_ref|^2 / |a_ref|^2))
double rms_relative_error(const std::vector<vec3>& acc, const std::vector<vec3>& reference) {
  double sum = 0;
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const vec3 d{acc[i][0] - reference[i][0], acc[i][1] - reference[i][1],
                 acc[i][2] - reference[i][2]};
    sum += norm2(d) / norm2(reference[i]);
  }
  return std::sqrt(sum / static_cast<double>(acc.size()));
}

struct forces {
  std::vector<vec3> acc;
  std::vector<double> pot;
  explicit forces(std::size_t n) : acc(n, vec3{0, 0, 0}), pot(n, 0.0) {}
};

}  // namespace

TEST_CASE("TreePM forces match Ewald summation and improve as theta shrinks", "[nbody][accuracy]") {
  // A concentrated clump: most of its force is short-range, where the tree is exact but for
  // the opening angle, and the rest comes through the mesh.
  const auto particles = nbody::plummer_clump(1000, {0.3, 0.4, 0.55}, 0.02, 1.0, 1);
  forces reference(particles.size());
  nbody::ewald_forces(1.0, particles, reference.acc, reference.pot);

  const nbody::force_params defaults;
  forces treepm(particles.size());
  nbody::treepm_forces(defaults, particles, treepm.acc, treepm.pot);
  const double default_error = rms_relative_error(treepm.acc, reference.acc);
  std::cout << "nbody.physics: rms relative force error at the defaults (theta " << defaults.theta
            << ", mesh " << defaults.mesh << "): " << default_error << "\n";
  CHECK(default_error < 1e-3);

  // Potentials share Ewald's convention (each source averages to zero over the box, no self
  // term); what remains is the mesh's error, far below the clump's potential depth.
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < particles.size(); ++i) {
    diff2 += (treepm.pot[i] - reference.pot[i]) * (treepm.pot[i] - reference.pot[i]);
    ref2 += reference.pot[i] * reference.pot[i];
  }
  const double pot_error = std::sqrt(diff2 / ref2);
  std::cout << "nbody.physics: rms potential error relative to rms potential: " << pot_error
            << "\n";
  CHECK(pot_error < 2e-3);

  std::vector<double> errors;
  for (double theta : {0.8, 0.5, 0.3}) {
    nbody::force_params params;
    params.theta = theta;
    nbody::treepm_forces(params, particles, treepm.acc, treepm.pot);
    errors.push_back(rms_relative_error(treepm.acc, reference.acc));
    std::cout << "nbody.physics: rms relative force error at theta " << theta << ": "
              << errors.back() << "\n";
  }
  CHECK(errors[0] > errors[1]);
  CHECK(errors[1] > errors[2]);
}

TEST_CASE("a node's quadrupole brings its pull several times closer to the direct sum",
          "[nbody][tree]") {
  // A small clump of 60 particles in one chain cell, seen from outside it at two distances within
  // r_cut: theta 1.5 takes the clump's root node whole, theta 0.01 opens it to the leaves (the
  // direct sum). The pure monopole is the clump's mass at its centre of mass. The monopole's
  // error falls as (size / distance)^2 and the quadrupole's as its cube, so halving the clump
  // must cut the quadrupole's error by far more than 4. Measured: the quadrupole's error is 0.12
  // of the monopole's for the larger clump at 0.05 and 0.035 at 0.1; halving the clump cuts it
  // 7x (the monopole's 4x); the potential's is 0.03 of the monopole's.
  for (const double softening : {0.0, 0.003}) {
    nbody::force_params params;
    params.softening = softening;
    const vec3 centre{0.3125, 0.3125, 0.3125};  // the middle of chain cell (2, 2, 2) of 8
    std::vector<double> quad_errors;
    for (const double half_size : {0.006, 0.003}) {
      auto clump = nbody::plummer_clump(60, centre, half_size / 3, 1.0, 3);
      double mass = 0;
      vec3 com{0, 0, 0};
      for (particle& p : clump) {
        for (int d = 0; d < 3; ++d)
          p.pos[d] = centre[d] + std::clamp(p.pos[d] - centre[d], -half_size, half_size);
        mass += p.mass;
        for (int d = 0; d < 3; ++d) com[d] += p.mass * p.pos[d];
      }
      for (double& x : com) x /= mass;
      const std::vector<particle> monopole{{0, mass, com, {0, 0, 0}}};
      for (const double distance : {0.05, 0.1}) {
        INFO("softening " << softening << ", clump half size " << half_size << ", distance "
                          << distance);
        REQUIRE(distance < params.cutoff());
        const std::vector<particle> target{
            {999,
             1e-9,
             {centre[0] + 0.48 * distance, centre[1] + 0.6 * distance, centre[2] + 0.64 * distance},
             {0, 0, 0}}};
        auto pull = [&](const std::vector<particle>& sources, double theta) {
          nbody::force_params p = params;
          p.theta = theta;
          forces f(1);
          nbody::short_range_tree(p, sources).accelerate(target, f.acc, f.pot);
          return f;
        };
        const forces direct = pull(clump, 0.01), quad = pull(clump, 1.5);
        const forces mono = pull(monopole, 1.5);
        const double mono_error = rms_relative_error(mono.acc, direct.acc);
        const double quad_error = rms_relative_error(quad.acc, direct.acc);
        CHECK(quad_error < 0.2 * mono_error);
        CHECK(std::abs(quad.pot[0] - direct.pot[0]) < 0.3 * std::abs(mono.pot[0] - direct.pot[0]));
        // The acceleration is minus the gradient of the potential, quadrupole terms included
        // (to the erfc table's interpolation, ~1e-3 of the slope).
        nbody::force_params wide = params;
        wide.theta = 1.5;
        const nbody::short_range_tree tree(wide, clump);
        for (int d = 0; d < 3; ++d) {
          const double h = 1e-6;
          std::vector<particle> ahead = target, behind = target;
          ahead[0].pos[d] += h;
          behind[0].pos[d] -= h;
          forces fa(1), fb(1);
          tree.accelerate(ahead, fa.acc, fa.pot);
          tree.accelerate(behind, fb.acc, fb.pot);
          const double gradient = (fa.pot[0] - fb.pot[0]) / (2 * h);
          CHECK(std::abs(-gradient - quad.acc[0][d]) < 2e-3 * std::sqrt(norm2(quad.acc[0])));
        }
        if (distance == 0.05) quad_errors.push_back(quad_error);
      }
    }
    CHECK(quad_errors[1] < quad_errors[0] / 5);
  }
}

TEST_CASE("Ewald summation: Newton up close, nothing on a lattice, no net force",
          "[nbody][ewald]") {
  SECTION("two close particles in a big box pull as m / r^2") {
    const double r = 0.01;
    const std::vector<particle> pair{{0, 0.5, {0.4, 0.5, 0.5}, {0, 0, 0}},
                                     {1, 0.5, {0.4 + r * 0.6, 0.5 + r * 0.8, 0.5}, {0, 0, 0}}};
    forces f(2);
    nbody::ewald_forces(1.0, pair, f.acc, f.pot);
    const double newton = 0.5 / (r * r);
    // The periodic images and the background change it by ~(4 pi / 3) rho r^3 / m ~ 1e-5.
    CHECK(f.acc[0][0] == Approx(newton * 0.6).epsilon(1e-4));
    CHECK(f.acc[0][1] == Approx(newton * 0.8).epsilon(1e-4));
    CHECK(std::abs(f.acc[0][2]) < 1e-8 * newton);
    CHECK(f.acc[1][0] == Approx(-newton * 0.6).epsilon(1e-4));
    // The potential is -m / r plus a smooth periodic part of order m / L.
    CHECK(std::abs(f.pot[0] + 0.5 / r) < 5.0);
  }
  SECTION("a perfect lattice feels no force") {
    const auto lattice = nbody::perturbed_lattice(4, 1.0, 0.0, 7);
    forces f(lattice.size());
    nbody::ewald_forces(1.0, lattice, f.acc, f.pot);
    const double scale = lattice[0].mass / (0.25 * 0.25);  // a neighbour's pull
    for (const vec3& a : f.acc) CHECK(std::sqrt(norm2(a)) < 1e-9 * scale);
    // Every site is equivalent, so every potential is the same.
    for (double p : f.pot) CHECK(p == Approx(f.pot[0]).epsilon(1e-10));
  }
  SECTION("forces sum to zero (momentum)") {
    const auto clump = nbody::plummer_clump(300, {0.5, 0.5, 0.5}, 0.1, 1.0, 3);
    forces f(clump.size());
    nbody::ewald_forces(1.0, clump, f.acc, f.pot);
    vec3 total{0, 0, 0};
    double magnitude = 0;
    for (std::size_t i = 0; i < clump.size(); ++i) {
      for (int d = 0; d < 3; ++d) total[d] += clump[i].mass * f.acc[i][d];
      magnitude += clump[i].mass * std::sqrt(norm2(f.acc[i]));
    }
    CHECK(std::sqrt(norm2(total)) < 1e-10 * magnitude);
  }
}

namespace {

// The particles a rank holding the slab x in [lo, hi) needs: every chain cell within one cell
// of a slab particle's cell, whole.
std::vector<particle> slab_sources(const std::vector<particle>& all, const nbody::chain_grid& grid,
                                   const std::vector<particle>& slab) {
  std::set<int> needed_x;
  for (const particle& p : slab) {
    const int cx = grid.cell_of(p.pos)[0];
    for (int dx = -1; dx <= 1; ++dx) needed_x.insert(grid.wrap(cx + dx));
  }
  std::vector<particle> sources;
  for (const particle& p : all) {
    if (needed_x.count(grid.cell_of(p.pos)[0]) != 0) sources.push_back(p);
  }
  return sources;
}

}  // namespace

TEST_CASE("short-range forces do not depend on which particles a rank holds",
          "[nbody][decomposition]") {
  // GADGET-2's split (5 chain cells per side) and a finer one (11), so that slabs see only part
  // of the box; a clump and a lattice background so that every chain cell is populated.
  nbody::force_params gadget;
  gadget.split_cells = 1.25;
  gadget.cutoff_splits = 4.5;
  gadget.theta = 0.5;
  nbody::force_params fine = gadget;
  fine.mesh = 64;
  gadget.mesh = 32;  // 5 chain cells per side (64 is the default: 11 with this split)
  for (const nbody::force_params& params : {gadget, fine}) {
    auto particles = nbody::plummer_clump(400, {0.45, 0.5, 0.5}, 0.08, 1.0, 11);
    auto background = nbody::perturbed_lattice(7, 1.0, 0.3, 12);
    for (particle& p : background) {
      p.id += 1000;
      p.mass = particles[0].mass;
    }
    particles.insert(particles.end(), background.begin(), background.end());

    const nbody::chain_grid grid(params);
    INFO("chain cells per side " << grid.per_side());
    forces whole(particles.size());
    nbody::short_range_tree(params, particles).accelerate(particles, whole.acc, whole.pot);

    std::mt19937_64 rng(5);
    std::size_t compared = 0;
    for (int s = 0; s < 4; ++s) {
      std::vector<particle> slab;
      std::vector<std::size_t> where;
      for (std::size_t i = 0; i < particles.size(); ++i) {
        if (particles[i].pos[0] >= 0.25 * s && particles[i].pos[0] < 0.25 * (s + 1)) {
          slab.push_back(particles[i]);
          where.push_back(i);
        }
      }
      auto sources = slab_sources(particles, grid, slab);
      CHECK(sources.size() < particles.size());  // the slab really sees only part of the box
      std::shuffle(sources.begin(), sources.end(), rng);
      forces part(slab.size());
      nbody::short_range_tree(params, sources).accelerate(slab, part.acc, part.pot);
      for (std::size_t k = 0; k < slab.size(); ++k) {
        const std::size_t i = where[k];
        REQUIRE(part.acc[k] == whole.acc[i]);  // bitwise, not approximately
        REQUIRE(part.pot[k] == whole.pot[i]);
        ++compared;
      }
    }
    CHECK(compared == particles.size());
  }
}

TEST_CASE("mass meshes deposited in parts add up to the same bits", "[nbody][decomposition]") {
  const nbody::force_params params;
  auto particles = nbody::plummer_clump(500, {0.5, 0.5, 0.5}, 0.1, 1.0, 21);
  double total = 0;
  for (const particle& p : particles) total += p.mass;
  nbody::mass_mesh all(params, total);
  all.deposit(particles);

  std::vector<nbody::mass_mesh> parts(3, nbody::mass_mesh(params, total));
  std::mt19937_64 rng(9);
  std::shuffle(particles.begin(), particles.end(), rng);
  const std::size_t third = particles.size() / 3;
  parts[0].deposit(std::span(particles).subspan(0, third));
  parts[1].deposit(std::span(particles).subspan(third, third));
  parts[2].deposit(std::span(particles).subspan(2 * third));
  nbody::mass_mesh summed(params, total);
  for (int order : {2, 0, 1}) {  // any order: integer addition
    auto cells = summed.cells();
    const auto part = parts[order].cells();
    for (std::size_t c = 0; c < cells.size(); ++c) cells[c] += part[c];
  }
  REQUIRE(std::equal(summed.cells().begin(), summed.cells().end(), all.cells().begin()));

  // The mesh holds the mass, to half a quantum per weight (27 per particle).
  std::int64_t quanta = 0;
  for (std::int64_t c : all.cells()) quanta += c;
  CHECK(std::abs(static_cast<double>(quanta) * all.quantum() - total) <
        13.5 * static_cast<double>(particles.size()) * all.quantum());

  // Equal meshes give equal long-range forces, bit for bit, on separately planned solvers.
  nbody::pm_solver first(params), second(params);
  first.solve(all);
  second.solve(summed);
  forces a(particles.size()), b(particles.size());
  first.interpolate(particles, a.acc, a.pot);
  second.interpolate(particles, b.acc, b.pot);
  CHECK(a.acc == b.acc);
  CHECK(a.pot == b.pot);
}

TEST_CASE("kick-drift-kick conserves the energy of an isolated Plummer clump", "[nbody][energy]") {
  nbody::force_params params;
  params.softening = 0.005;
  const double scale_radius = 0.05;
  auto particles = nbody::plummer_clump(256, {0.5, 0.5, 0.5}, scale_radius, 1.0, 31);
  // Dynamical time sqrt(a^3 / G M) = 0.011; a step of 1/100 of it also resolves a close
  // encounter at the softening length (sqrt(eps^3 / 2 m) = 0.004, 40 steps).
  const double t_dyn = std::sqrt(scale_radius * scale_radius * scale_radius);
  const double dt = t_dyn / 100;
  const int steps = 300;
  const double bound = 1e-3;

  forces f(particles.size());
  nbody::treepm_forces(params, particles, f.acc, f.pot);
  const double e0 = nbody::kinetic_energy(particles) + nbody::potential_energy(particles, f.pot);
  REQUIRE(e0 < 0);  // bound
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    nbody::kick(particles, f.acc, 0.5 * dt);
    nbody::drift(particles, dt, params.box);
    nbody::treepm_forces(params, particles, f.acc, f.pot);
    nbody::kick(particles, f.acc, 0.5 * dt);
    const double e = nbody::kinetic_energy(particles) + nbody::potential_energy(particles, f.pot);
    worst = std::max(worst, std::abs(e - e0) / std::abs(e0));
  }
  std::cout << "nbody.physics: max relative energy error over " << steps << " steps ("
            << steps * dt / t_dyn << " dynamical times): " << worst << " (bound " << bound << ")\n";
  CHECK(worst < bound);
  for (const particle& p : particles) {
    for (double x : p.pos) CHECK((x >= 0 && x < params.box));
  }
}

TEST_CASE("drift wraps positions into [0, box), never onto box", "[nbody][integrator]") {
  CHECK(nbody::wrap_position(-1e-20, 1.0) >= 0.0);
  CHECK(nbody::wrap_position(-1e-20, 1.0) < 1.0);
  CHECK(nbody::wrap_position(1.0, 1.0) == 0.0);
  CHECK(nbody::wrap_position(std::nextafter(1.0, 0.0), 1.0) < 1.0);
  CHECK(nbody::wrap_position(2.25, 1.0) == 0.25);
  CHECK(nbody::wrap_position(-0.25, 1.0) == 0.75);
  // Far outside the box the result still lands inside it (x - box floor(x / box) did not).
  for (const double x : {1e17, -1e17, 1e40, -3e300}) {
    CAPTURE(x);
    const double w = nbody::wrap_position(x, 0.3);
    CHECK(w >= 0.0);
    CHECK(w < 0.3);
  }
  std::vector<particle> p{{0, 1.0, {0.999, 0.001, 0.5}, {1.0, -1.0, 0.0}}};
  nbody::drift(p, 0.002, 1.0);
  CHECK(p[0].pos[0] == Approx(0.001));
  CHECK(p[0].pos[1] == Approx(0.999));
}

TEST_CASE("initial conditions are reproducible and as specified", "[nbody][ics]") {
  const auto a = nbody::plummer_clump(200, {0.5, 0.5, 0.5}, 0.05, 1.0, 42);
  const auto b = nbody::plummer_clump(200, {0.5, 0.5, 0.5}, 0.05, 1.0, 42);
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(particle)) == 0);
  double mass = 0;
  vec3 momentum{0, 0, 0};
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].id == i);
    mass += a[i].mass;
    for (int d = 0; d < 3; ++d) momentum[d] += a[i].mass * a[i].vel[d];
  }
  CHECK(mass == Approx(1.0));
  CHECK(std::sqrt(norm2(momentum)) < 1e-12);
  // Virial equilibrium: 2K ~ -W (W of the isolated Plummer sphere, -3 pi / 32 a).
  const double kinetic = nbody::kinetic_energy(a);
  CHECK(2 * kinetic == Approx(3 * std::numbers::pi / (32 * 0.05)).epsilon(0.25));

  const auto lattice = nbody::perturbed_lattice(4, 2.0, 0.1, 1);
  REQUIRE(lattice.size() == 64);
  CHECK(lattice[1].id == 1);
  CHECK(lattice[1].pos[2] == Approx(0.75).margin(0.05 + 1e-12));  // z varies fastest
  CHECK(lattice[16].pos[0] == Approx(0.75).margin(0.05 + 1e-12));
}

namespace {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("nbody_physics_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

std::vector<unsigned char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("snapshots round-trip and refuse malformed files", "[nbody][snapshot]") {
  temp_dir dir;
  const auto particles = nbody::plummer_clump(50, {0.5, 0.5, 0.5}, 0.05, 1.0, 8);
  const auto good = dir.path / "good.snap";
  nbody::write_snapshot(good, 1.0, 0.125, particles);
  const nbody::snapshot back = nbody::read_snapshot(good);
  CHECK(back.box == 1.0);
  CHECK(back.time == 0.125);
  REQUIRE(back.particles.size() == particles.size());
  CHECK(std::memcmp(back.particles.data(), particles.data(), particles.size() * sizeof(particle)) ==
        0);

  const auto bytes = read_bytes(good);
  const auto bad = dir.path / "bad.snap";
  auto refused = [&](const std::vector<unsigned char>& content, const std::string& why) {
    write_bytes(bad, content);
    REQUIRE_THROWS_WITH(nbody::read_snapshot(bad), Contains("bad.snap") && Contains(why));
  };
  auto refused_particles = [&](std::vector<particle> ps, const std::string& why) {
    nbody::write_snapshot(bad, 1.0, 0.0, ps);
    REQUIRE_THROWS_WITH(nbody::read_snapshot(bad), Contains("bad.snap") && Contains(why));
  };

  REQUIRE_THROWS_WITH(nbody::read_snapshot(dir.path / "absent.snap"),
                      Contains("absent.snap") && Contains("missing file"));
  {
    auto b = bytes;
    b[0] = 'X';
    refused(b, "bad magic");
  }
  {
    auto b = bytes;
    b[8] = 7;
    refused(b, "unknown version 7");
  }
  refused({bytes.begin(), bytes.begin() + 20}, "truncated header");
  refused({bytes.begin(), bytes.end() - 10}, "truncated");
  refused({bytes.begin(), bytes.end() - 64}, "does not match the file size");
  {
    auto b = bytes;
    b[32] += 1;  // the count field
    refused(b, "does not match the file size");
  }
  {
    auto b = bytes;
    b[48 + 64 * 3 + 20] ^= 0x10;  // a bit of particle 3's position
    refused(b, "checksum mismatch");
  }
  {
    auto ps = particles;
    ps[4].vel[1] = std::numeric_limits<double>::quiet_NaN();
    refused_particles(ps, "non-finite");
  }
  {
    auto ps = particles;
    ps[5].mass = 0;
    refused_particles(ps, "non-positive mass");
  }
  {
    auto ps = particles;
    ps[6].pos[2] = 1.0;  // the box's far face belongs to the next image
    refused_particles(ps, "outside [0, box)");
  }
  {
    auto ps = particles;
    ps[7].id = ps[2].id;
    refused_particles(ps, "duplicate id 2");
  }
}

TEST_CASE("force_params::validate refuses nonsense with a clear message", "[nbody][params]") {
  REQUIRE_NOTHROW(nbody::force_params{}.validate());
  auto refused = [](auto change, const std::string& why) {
    nbody::force_params p;
    change(p);
    REQUIRE_THROWS_WITH(p.validate(), Contains(why));
  };
  refused([](auto& p) { p.box = -1; }, "box must be in [1e-30, 1e30]");
  refused([](auto& p) { p.box = 1e-310; }, "box must be in [1e-30, 1e30]");
  refused([](auto& p) { p.split_cells = 0.01; }, "more than 256 chain cells per side");
  refused([](auto& p) { p.mesh = 4; }, "mesh must be in [8, 1024]");
  refused([](auto& p) { p.theta = 0; }, "theta must be in (0, 1.5]");
  refused([](auto& p) { p.theta = 2; }, "theta must be in (0, 1.5]");
  refused([](auto& p) { p.split_cells = 0; }, "split_cells must be finite and positive");
  refused([](auto& p) { p.cutoff_splits = -1; }, "cutoff_splits must be finite and positive");
  refused([](auto& p) { p.softening = -0.1; }, "softening must be finite and non-negative");
  refused([](auto& p) { p.leaf_size = 0; }, "leaf_size must be at least 1");
  refused([](auto& p) { p.mesh = 16; }, "at least 3 are needed");
  // The mesh and the tree check them too.
  nbody::force_params p;
  p.mesh = 2;
  REQUIRE_THROWS_AS(nbody::pm_solver(p), std::invalid_argument);
  REQUIRE_THROWS_AS(nbody::chain_grid(p), std::invalid_argument);
}
