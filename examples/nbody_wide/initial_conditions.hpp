// SPDX-License-Identifier: MIT
// Initial conditions: a Plummer clump in equilibrium, and a perturbed lattice. A fixed seed
// gives the same particles bit for bit (std::mt19937_64 and arithmetic only; no
// std::*_distribution, whose algorithms differ between standard libraries).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <random>
#include <stdexcept>
#include <vector>

#include "particle.hpp"
#include "treepm.hpp"

namespace nbody {

namespace detail {

// Uniform in [0, 1) from the top 53 bits.
inline double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

inline vec3 random_direction(std::mt19937_64& rng) {
  const double z = 2 * uniform(rng) - 1;
  const double phi = 2 * std::numbers::pi * uniform(rng);
  const double rho = std::sqrt(std::max(0.0, 1 - z * z));
  return {rho * std::cos(phi), rho * std::sin(phi), z};
}

}  // namespace detail

// Total mass 1 (G = 1), ids 0..n-1. The sphere is truncated at 10 scale radii, or just inside
// half the box if that is smaller, so the clump does not meet its own periodic images.
inline std::vector<particle> plummer_clump(std::size_t n, const vec3& centre, double scale_radius,
                                           double box, std::uint64_t seed) {
  if (n == 0) throw std::invalid_argument("nbody::plummer_clump: no particles");
  if (!(scale_radius > 0 && box > 0))
    throw std::invalid_argument("nbody::plummer_clump: scale radius and box must be positive");
  const double r_max = std::min(10 * scale_radius, 0.49 * box);
  std::mt19937_64 rng(seed);
  std::vector<particle> out(n);
  vec3 momentum{0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    // Radius from the inverted cumulative mass M(r) = r^3 / (r^2 + a^2)^(3/2).
    double r;
    do {
      const double x = std::max(detail::uniform(rng), 1e-12);
      r = scale_radius / std::sqrt(std::pow(x, -2.0 / 3.0) - 1);
    } while (!(r <= r_max));
    const vec3 dir = detail::random_direction(rng);
    // Speed as a fraction q of the escape speed, g(q) = q^2 (1 - q^2)^(7/2) by rejection
    // (Aarseth, Henon and Wielen 1974); 0.1 bounds g.
    double q;
    while (true) {
      q = detail::uniform(rng);
      const double y = 0.1 * detail::uniform(rng);
      if (y < q * q * std::pow(1 - q * q, 3.5)) break;
    }
    const double escape =
        std::sqrt(2.0 / scale_radius) * std::pow(1 + r * r / (scale_radius * scale_radius), -0.25);
    const vec3 vdir = detail::random_direction(rng);
    particle& p = out[i];
    p.id = i;
    p.mass = 1.0 / static_cast<double>(n);
    for (int d = 0; d < 3; ++d) {
      p.pos[d] = wrap_position(centre[d] + r * dir[d], box);
      p.vel[d] = q * escape * vdir[d];
      momentum[d] += p.mass * p.vel[d];
    }
  }
  for (particle& p : out) {
    for (int d = 0; d < 3; ++d) p.vel[d] -= momentum[d];  // total mass 1: momentum = mean velocity
  }
  return out;
}

// per_side^3 particles of total mass 1 at the lattice points (i + 1/2) * spacing, each moved by
// up to amplitude * spacing on every axis; ids x-major, velocities zero.
inline std::vector<particle> perturbed_lattice(std::size_t per_side, double box, double amplitude,
                                               std::uint64_t seed) {
  if (per_side == 0 || !(box > 0) || !(amplitude >= 0))
    throw std::invalid_argument("nbody::perturbed_lattice: bad per_side, box or amplitude");
  std::mt19937_64 rng(seed);
  const double spacing = box / static_cast<double>(per_side);
  const std::size_t n = per_side * per_side * per_side;
  std::vector<particle> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t index[3] = {i / (per_side * per_side), (i / per_side) % per_side,
                                  i % per_side};
    particle& p = out[i];
    p.id = i;
    p.mass = 1.0 / static_cast<double>(n);
    p.vel = {0, 0, 0};
    for (int d = 0; d < 3; ++d) {
      const double offset = amplitude * spacing * (2 * detail::uniform(rng) - 1);
      p.pos[d] = wrap_position((static_cast<double>(index[d]) + 0.5) * spacing + offset, box);
    }
  }
  return out;
}

}  // namespace nbody
