// SPDX-License-Identifier: MIT
// The serial TreePM force (mesh plus tree, all particles on one rank) and the leapfrog steps.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>

#include "force_params.hpp"
#include "particle.hpp"
#include "pm_mesh.hpp"
#include "short_range_tree.hpp"

namespace nbody {

// OVERWRITES acc and pot with the total (long- plus short-range) acceleration and potential.
inline void treepm_forces(const force_params& params, std::span<const particle> particles,
                          std::span<vec3> acc, std::span<double> pot) {
  if (acc.size() != particles.size() || pot.size() != particles.size())
    throw std::invalid_argument("nbody::treepm_forces: spans of different sizes");
  double total_mass = 0;
  for (const particle& p : particles) total_mass += p.mass;
  mass_mesh mass(params, total_mass);
  mass.deposit(particles);
  pm_solver solver(params);
  solver.solve(mass);
  for (std::size_t i = 0; i < particles.size(); ++i) {
    acc[i] = {0, 0, 0};
    pot[i] = 0;
  }
  solver.interpolate(particles, acc, pot);
  short_range_tree(params, particles).accelerate(particles, acc, pot);
}

inline void kick(std::span<particle> particles, std::span<const vec3> acc, double dt) {
  if (acc.size() != particles.size())
    throw std::invalid_argument("nbody::kick: spans of different sizes");
  for (std::size_t i = 0; i < particles.size(); ++i) {
    for (int d = 0; d < 3; ++d) particles[i].vel[d] += acc[i][d] * dt;
  }
}

// Maps x into [0, box). fmod is exact, so the result is a pure function of x and box (the same
// on every rank) however far x went; a negative remainder plus box may round to box itself,
// which folds to 0.
inline double wrap_position(double x, double box) {
  double w = std::fmod(x, box);
  if (w < 0) w += box;
  if (!(w < box)) w = 0;  // also a non-finite x: the driver stops on those (refuse_blown_up)
  return w;
}

inline void drift(std::span<particle> particles, double dt, double box) {
  for (particle& p : particles) {
    for (int d = 0; d < 3; ++d) p.pos[d] = wrap_position(p.pos[d] + p.vel[d] * dt, box);
  }
}

inline double kinetic_energy(std::span<const particle> particles) {
  double sum = 0;
  for (const particle& p : particles) {
    sum += 0.5 * p.mass * (p.vel[0] * p.vel[0] + p.vel[1] * p.vel[1] + p.vel[2] * p.vel[2]);
  }
  return sum;
}

// Half of sum m phi: each pair is in two particles' potentials.
inline double potential_energy(std::span<const particle> particles, std::span<const double> pot) {
  if (pot.size() != particles.size())
    throw std::invalid_argument("nbody::potential_energy: spans of different sizes");
  double sum = 0;
  for (std::size_t i = 0; i < particles.size(); ++i) sum += particles[i].mass * pot[i];
  return 0.5 * sum;
}

}  // namespace nbody
