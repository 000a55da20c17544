// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The Lennard-Jones force kernel over a half neighbour list: 4 (r^-12 - r^-6), truncated at
/// the cutoff without a shift (LAMMPS's pair lj/cut with epsilon = sigma = 1).

#include <cstddef>
#include <cstdint>
#include <span>

#include "neighbor_list.hpp"

namespace md {

/// What the kernel adds up besides forces: the pair energy and the virial, sum over pairs of
/// r_ij . f_ij (the pressure's pair part times 3V).
struct pair_tally {
  double energy = 0;
  double virial = 0;
};

/// Adds the forces of the list's pairs with r < cutoff into `force` (3 per atom, every atom
/// of the system: a pair's j may be anyone's). Newton's third law: each pair is computed once
/// and acts on both atoms. With `Tally` the energy and virial are summed too; the steps that
/// print no thermo skip that work, as LAMMPS does.
template <bool Tally>
pair_tally add_lj_forces(std::span<const double> x, const half_neighbor_list& list, double cutoff,
                         std::span<double> force) {
  const double cutoff_sq = cutoff * cutoff;
  const auto& shifts = list.shifts();
  const std::uint32_t* neighbors = list.neighbors().data();
  const double* pos = x.data();
  double* f = force.data();
  pair_tally tally;
  const atom_range range = list.range();
  for (std::size_t i = range.first; i < range.last; ++i) {
    const double xi = pos[3 * i], yi = pos[3 * i + 1], zi = pos[3 * i + 2];
    double fxi = 0, fyi = 0, fzi = 0;
    const std::size_t end = list.first(i + 1);
    for (std::size_t k = list.first(i); k < end; ++k) {
      const std::uint32_t entry = neighbors[k];
      const std::size_t j = entry >> half_neighbor_list::image_bits;
      const double* shift = shifts[entry & half_neighbor_list::image_mask];
      const double dx = xi - pos[3 * j] - shift[0];
      const double dy = yi - pos[3 * j + 1] - shift[1];
      const double dz = zi - pos[3 * j + 2] - shift[2];
      const double r2 = dx * dx + dy * dy + dz * dz;
      if (r2 >= cutoff_sq) continue;
      // LAMMPS's lj/cut arithmetic with lj1 = 48, lj2 = 24, lj3 = lj4 = 4.
      const double r2inv = 1.0 / r2;
      const double r6inv = r2inv * r2inv * r2inv;
      const double forcelj = r6inv * (48.0 * r6inv - 24.0);
      const double fpair = forcelj * r2inv;
      fxi += dx * fpair;
      fyi += dy * fpair;
      fzi += dz * fpair;
      f[3 * j] -= dx * fpair;
      f[3 * j + 1] -= dy * fpair;
      f[3 * j + 2] -= dz * fpair;
      if constexpr (Tally) {
        tally.energy += r6inv * (4.0 * r6inv - 4.0);
        tally.virial += r2 * fpair;
      }
    }
    f[3 * i] += fxi;
    f[3 * i + 1] += fyi;
    f[3 * i + 2] += fzi;
  }
  return tally;
}

}  // namespace md
