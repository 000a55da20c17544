// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Velocity Verlet with unit masses (LAMMPS's fix nve), and the periodic wrap done before a
/// neighbour list build.

#include <cstddef>
#include <span>

#include "system.hpp"

namespace md {

/// First half of a step: v += dt/2 f, then x += dt v (fix nve's initial_integrate).
inline void kick_and_drift(system& s, std::span<const double> force, double dt) {
  const double half_dt = 0.5 * dt;
  for (std::size_t k = 0; k < s.x.size(); ++k) {
    s.v[k] += half_dt * force[k];
    s.x[k] += dt * s.v[k];
  }
}

/// Second half of a step: v += dt/2 f with the new forces (fix nve's final_integrate).
inline void kick(system& s, std::span<const double> force, double dt) {
  const double half_dt = 0.5 * dt;
  for (std::size_t k = 0; k < s.v.size(); ++k) s.v[k] += half_dt * force[k];
}

/// Maps every position back into [0, L) by whole box lengths (LAMMPS's Domain::pbc).
inline void wrap_into_box(system& s) {
  const double length = s.box_length;
  for (double& coord : s.x) {
    if (coord < 0) coord += length;
    if (coord >= length) coord -= length;
    if (coord < 0) coord = 0;  // -tiny + L rounds to L, and L - L to 0: never leave the box
  }
}

}  // namespace md
