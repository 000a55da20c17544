// SPDX-License-Identifier: MIT
// A TreePM N-body code run as one job or across sites, as CosmoGrid ran GreeM over MPWide
// (seed 004), written once over commx::variant::communicator and built per stack by
// commx_add_variants (nbody_wide_<stack>).
//
//   commxrun -n 4 ./nbody_wide_shm --lattice 32 --steps 10          one job
//   commxrun -n 4 --sites 2 ./nbody_wide_shm_tcp_wan ...             sites in one communicator
//   two jobs, each with COMMX_WIDE_* set for its leader (README.md)  each site its own job
//
// Exit status: 0 ok; 2 bad options or initial conditions file; 1 the run failed (a rank, a
// site or the wide link lost, named on stderr).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "command_line.hpp"
#include "commx/variant.hpp"
#include "initial_conditions.hpp"
#include "run_output.hpp"
#include "simulation.hpp"
#include "site_links.hpp"
#include "snapshot.hpp"
#include "wide_link.hpp"

namespace {

using comm = commx::variant::communicator;

// A file the run will write must have somewhere to go: found before any rank starts.
void check_writable(const std::optional<std::string>& path, const char* option) {
  if (!path) return;
  std::filesystem::path dir = std::filesystem::path(*path).parent_path();
  if (dir.empty()) dir = ".";
  if (::access(dir.c_str(), W_OK) != 0) {
    throw std::invalid_argument(
        fmt::format("{} '{}': cannot write in '{}'", option, *path, dir.string()));
  }
}

std::vector<nbody::particle> make_initial(nbody::command_line& options) {
  if (options.read_initial) {
    nbody::snapshot s = nbody::read_snapshot(*options.read_initial);
    options.run.forces.box = s.box;
    options.run.forces.validate();
    const double mass = nbody::total_mass(s.particles);
    if (s.particles.empty() || !std::isfinite(mass)) {
      throw std::invalid_argument(
          fmt::format("'{}' holds {} particles of total mass {}: nothing to run",
                      *options.read_initial, s.particles.size(), mass));
    }
    return std::move(s.particles);
  }
  const double box = options.run.forces.box;
  if (options.initial == nbody::initial_kind::plummer) {
    return nbody::plummer_clump(options.particles, {box / 2, box / 2, box / 2},
                                options.scale_radius * box, box, options.seed);
  }
  return nbody::perturbed_lattice(options.lattice, box, options.amplitude, options.seed);
}

struct run_totals {
  double wall = 0, compute = 0, local = 0, wide = 0, worst_energy_error = 0;
  int steps = 0;
};

template <class SiteComm, class WideComm>
void simulate(SiteComm& site, WideComm* wide, const char* arrangement,
              const nbody::command_line& options, const std::vector<nbody::particle>& initial) {
  nbody::step_clock clock;
  nbody::site_links<SiteComm, WideComm> links(site, wide, clock,
                                              nbody::problem_id(options.run, initial));
  const bool root = links.rank() == 0;
  if (root) {
    if (options.write_initial) {
      nbody::write_snapshot(*options.write_initial, options.run.forces.box, 0.0, initial);
    }
    const nbody::force_params& f = options.run.forces;
    fmt::print(
        "{}: {} particles, {} steps of {}, {} ranks at {} site(s) ({}), transport {}, "
        "collectives {}; mesh {}^3, r_s {:.4g}, r_cut {:.4g}, theta {}, softening {}\n",
        commx::variant::target_name, initial.size(), options.run.steps, options.run.dt,
        links.size(), links.sites(), arrangement, site.transport().name,
        comm::collectives_type::name, f.mesh, f.split_radius(), f.cutoff(), f.theta, f.softening);
    std::fflush(stdout);
  }
  std::optional<nbody::step_csv> csv;
  if (root && options.csv) csv.emplace(*options.csv);
  run_totals totals;
  nbody::simulation sim(links, clock, options.run, initial);
  sim.run([&](const nbody::step_report& r) {
    if (r.step > 0) {
      totals.wall += r.wall;
      totals.compute += r.mean.compute;
      totals.local += r.mean.local;
      totals.wide += r.mean.wide;
      ++totals.steps;
    }
    totals.worst_energy_error = std::max(totals.worst_energy_error, std::abs(r.energy_error));
    if (!root) return;
    fmt::print("{}", nbody::progress_line(r));
    std::fflush(stdout);
    if (csv) csv->add(r);
  });

  std::vector<nbody::particle> all = links.gather_all(sim.own());
  if (!root) return;
  std::sort(all.begin(), all.end(),
            [](const nbody::particle& a, const nbody::particle& b) { return a.id < b.id; });
  if (all.size() != initial.size()) {
    throw std::runtime_error(
        fmt::format("the run ended with {} particles of {}", all.size(), initial.size()));
  }
  if (options.snapshot) {
    nbody::write_snapshot(*options.snapshot, options.run.forces.box,
                          options.run.steps * options.run.dt, all);
  }
  const int n = std::max(totals.steps, 1);
  std::string arrangement_word(arrangement);
  std::replace(arrangement_word.begin(), arrangement_word.end(), ' ', '_');
  const double busy = totals.compute + totals.local + totals.wide;
  fmt::print("final state fingerprint: {:016x}\n", nbody::fingerprint(all));
  fmt::print(
      "nbody result: target={} arrangement={} ranks={} sites={} particles={} steps={} "
      "step_ms={:.3f} compute_ms={:.3f} local_ms={:.3f} wide_ms={:.3f} wide_fraction={:.4f} "
      "max_energy_error={:.3e}\n",
      commx::variant::target_name, arrangement_word, links.size(), links.sites(), all.size(),
      options.run.steps, 1e3 * totals.wall / n, 1e3 * totals.compute / n, 1e3 * totals.local / n,
      1e3 * totals.wide / n, busy > 0 ? totals.wide / busy : 0.0, totals.worst_energy_error);
  std::fflush(stdout);
}

// Which of the arrangements this launch is: each site its own job (COMMX_WIDE_ROOT set), one
// communicator whose ranks are at several sites, or one job at one site.
void run(const nbody::command_line& options, const std::vector<nbody::particle>& initial) {
  commx::run<comm>([&](comm& world) {
    if (nbody::sites_are_jobs()) {
      std::optional<nbody::wide_communicator> wide;
      commx::options wide_options;
      wide_options.timeout = world.timeout();
      if (world.rank() == 0) wide.emplace(nbody::join_wide_link(wide_options));
      simulate(world, wide ? &*wide : nullptr, "sites as jobs", options, initial);
      return;
    }
    bool several_sites = false;
    for (int r = 0; r < world.size(); ++r) several_sites |= world.site_of(r) != world.site_of(0);
    if (!several_sites) {
      simulate<comm, comm>(world, nullptr, "one job", options, initial);
      return;
    }
    comm site = world.split_by_site();
    comm leaders = world.split(site.rank() == 0 ? 0 : commx::undefined_color, world.rank());
    simulate(site, leaders.is_null() ? nullptr : &leaders, "sites in one communicator", options,
             initial);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = argc > 0 ? argv[0] : "nbody_wide";
  nbody::command_line options;
  std::vector<nbody::particle> initial;
  try {
    options = nbody::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      fmt::print("{}", nbody::usage(program));
      return 0;
    }
    check_writable(options.csv, "--csv");
    check_writable(options.snapshot, "--snapshot");
    check_writable(options.write_initial, "--write-ic");
    initial = make_initial(options);
    options.run.forces.softening = nbody::softening_for(options, initial.size());
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 2;
  }
  try {
    run(options, initial);
    return 0;
  } catch (const nbody::stopped&) {
    return 1;  // already said why
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
}
