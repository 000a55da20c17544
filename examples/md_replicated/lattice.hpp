// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// An fcc lattice as LAMMPS's `lattice fcc <density>` + `create_atoms 1 box` builds it.

#include <cmath>
#include <cstddef>

#include "system.hpp"

namespace md {

/// The fcc lattice constant at a reduced density: four atoms per cubic cell of side a.
[[nodiscard]] inline double fcc_lattice_constant(double density) {
  return std::pow(4.0 / density, 1.0 / 3.0);
}

/// A box of cells^3 fcc cells at `density`, velocities zero. Positions are (cell + basis) * a,
/// computed in that order so they are LAMMPS's bits; atoms are numbered as a serial LAMMPS run
/// numbers them: z cell outermost, then y, then x, then the basis atom.
[[nodiscard]] inline system make_fcc(int cells, double density) {
  constexpr double basis[4][3] = {
      {0.0, 0.0, 0.0}, {0.5, 0.5, 0.0}, {0.5, 0.0, 0.5}, {0.0, 0.5, 0.5}};
  const double a = fcc_lattice_constant(density);
  system s;
  s.box_length = cells * a;
  const auto n = static_cast<std::size_t>(cells);
  s.x.reserve(3 * 4 * n * n * n);
  for (int k = 0; k < cells; ++k) {
    for (int j = 0; j < cells; ++j) {
      for (int i = 0; i < cells; ++i) {
        for (const auto& b : basis) {
          s.x.push_back((i + b[0]) * a);
          s.x.push_back((j + b[1]) * a);
          s.x.push_back((k + b[2]) * a);
        }
      }
    }
  }
  s.v.assign(s.x.size(), 0.0);
  return s;
}

}  // namespace md
