// SPDX-License-Identifier: MIT
#pragma once
// The program's options. Every value is checked here, before any rank starts, so that a bad
// option fails at once with a message naming it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "force_params.hpp"
#include "simulation.hpp"

namespace nbody {

enum class initial_kind { lattice, plummer };

struct command_line {
  bool help = false;
  initial_kind initial = initial_kind::lattice;
  std::size_t lattice = 32;       // particles per side of the perturbed lattice
  double amplitude = 0.4;         // lattice displacements, in lattice spacings
  std::size_t particles = 8192;   // the Plummer clump's
  double scale_radius = 0.05;     // the Plummer clump's, in box lengths
  std::uint64_t seed = 20100901;  // MPWide's paper's month
  std::optional<std::string> read_initial, write_initial, csv, snapshot;
  std::optional<double> softening;  // else chosen by the initial conditions (softening_for)
  run_config run;
};

inline std::string usage(const std::string& program) {
  return fmt::format(
      "usage: {} [options]\n"
      "A TreePM N-body run (periodic unit box, G = 1): one job, or sites joined by a wide link\n"
      "(examples/nbody_wide/README.md).\n"
      "  --lattice N        perturbed lattice of N^3 particles (default 32)\n"
      "  --amplitude A      its random displacements, in spacings (default 0.4)\n"
      "  --plummer N        a Plummer clump of N particles instead\n"
      "  --scale R          the clump's scale radius, in box lengths (default 0.05)\n"
      "  --seed S           random seed of the initial conditions (default 20100901)\n"
      "  --read-ic FILE     start from a snapshot written by --write-ic or --snapshot\n"
      "  --write-ic FILE    write the initial conditions (global rank 0)\n"
      "  --steps N          steps (default 10)\n"
      "  --dt T             time step (default 0.01 lattice, 0.0005 clump)\n"
      "  --mesh M           particle-mesh cells per side (default {})\n"
      "  --theta T          tree opening angle (default {})\n"
      "  --softening E      Plummer softening of the short-range force (default 0.15 of the\n"
      "                     mean spacing; 0.1 of the clump's scale radius)\n"
      "  --no-balance       keep the blocks' edges where they start\n"
      "  --csv FILE         one row per step: time split, energy error\n"
      "  --snapshot FILE    the particles at the end (tools: plot.py draws its density)\n",
      program, force_params{}.mesh, force_params{}.theta);
}

namespace detail {

inline double parse_double(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') {
    throw std::invalid_argument(fmt::format("{} '{}' is not a number", option, text));
  }
  return v;
}

inline std::uint64_t parse_count(const std::string& option, const std::string& text,
                                 std::uint64_t least, std::uint64_t most) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-' || v < least || v > most) {
    throw std::invalid_argument(
        fmt::format("{} '{}' is not a whole number in [{}, {}]", option, text, least, most));
  }
  return v;
}

}  // namespace detail

inline command_line parse_command_line(const std::vector<std::string>& args) {
  command_line c;
  std::optional<double> dt;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw std::invalid_argument(fmt::format("{} needs a value", a));
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      c.help = true;
    } else if (a == "--lattice") {
      c.initial = initial_kind::lattice;
      c.lattice = detail::parse_count(a, value(), 2, 512);
    } else if (a == "--amplitude") {
      c.amplitude = detail::parse_double(a, value());
      if (!(c.amplitude >= 0 && c.amplitude < 1)) {
        throw std::invalid_argument("--amplitude must be in [0, 1) lattice spacings");
      }
    } else if (a == "--plummer") {
      c.initial = initial_kind::plummer;
      c.particles = detail::parse_count(a, value(), 2, std::uint64_t{1} << 26);
    } else if (a == "--scale") {
      c.scale_radius = detail::parse_double(a, value());
      if (!(c.scale_radius > 0 && c.scale_radius < 0.1)) {
        throw std::invalid_argument("--scale must be in (0, 0.1) box lengths");
      }
    } else if (a == "--seed") {
      c.seed = detail::parse_count(a, value(), 0, ~std::uint64_t{0});
    } else if (a == "--read-ic") {
      c.read_initial = value();
    } else if (a == "--write-ic") {
      c.write_initial = value();
    } else if (a == "--steps") {
      c.run.steps = static_cast<int>(detail::parse_count(a, value(), 0, 1000000));
    } else if (a == "--dt") {
      dt = detail::parse_double(a, value());
      if (!(*dt > 0 && *dt < 1)) throw std::invalid_argument("--dt must be in (0, 1)");
    } else if (a == "--mesh") {
      c.run.forces.mesh = static_cast<int>(detail::parse_count(a, value(), 8, 1024));
    } else if (a == "--theta") {
      c.run.forces.theta = detail::parse_double(a, value());
    } else if (a == "--softening") {
      c.softening = detail::parse_double(a, value());
      if (!(*c.softening >= 0 && *c.softening < 0.1)) {
        throw std::invalid_argument("--softening must be in [0, 0.1) box lengths");
      }
    } else if (a == "--no-balance") {
      c.run.balance = false;
    } else if (a == "--csv") {
      c.csv = value();
    } else if (a == "--snapshot") {
      c.snapshot = value();
    } else {
      throw std::invalid_argument(fmt::format("unknown option '{}' (--help lists them)", a));
    }
  }
  c.run.dt = dt.value_or(c.initial == initial_kind::lattice ? 0.01 : 0.0005);
  c.run.forces.validate();
  return c;
}

/// The softening the options give, or one that keeps close pairs from wrecking the energy:
/// a fraction of the mean spacing (or of the clump's scale radius), for `particles` in the box.
inline double softening_for(const command_line& c, std::size_t particles) {
  if (c.softening) return *c.softening;
  if (c.initial == initial_kind::plummer && !c.read_initial) {
    return 0.1 * c.scale_radius * c.run.forces.box;
  }
  return 0.15 * c.run.forces.box /
         std::cbrt(static_cast<double>(std::max<std::size_t>(particles, 1)));
}

}  // namespace nbody
