// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The replicated state of an MD run: a cubic periodic box and every atom's position and
/// velocity, in LJ reduced units (mass, epsilon, sigma and k_B are all 1).

#include <cstddef>
#include <vector>

namespace md {

/// Positions and velocities are interleaved x, y, z per atom (as LAMMPS's `double **x`), so one
/// atom's coordinates share a cache line and the force buffer can be summed as one array.
struct system {
  double box_length = 0;  // the box is [0, box_length)^3, periodic in every direction
  std::vector<double> x;  // 3 * atoms
  std::vector<double> v;  // 3 * atoms

  [[nodiscard]] std::size_t atoms() const { return x.size() / 3; }
  [[nodiscard]] double volume() const { return box_length * box_length * box_length; }
};

}  // namespace md
