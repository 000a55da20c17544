// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The Lennard-Jones force kernel over a half neighbour list: 4 (r^-12 - r^-6), truncated at
/// the cutoff without a shift (LAMMPS's pair lj/cut with epsilon = sigma = 1).
///
/// Sums in double (the default) or in fixed point (`std::int64_t`, --survive): each pair's
/// contribution is rounded to a multiple of 2^-36 (forces) or 2^-37 (energy, virial) before it
/// is added, so the sum over every pair is exact and its bits do not depend on how the pairs are
/// shared among ranks nor on the order any allreduce adds the ranks' parts. That is what lets a
/// run that lost ranks, and split its pairs again among fewer, end with the same bits as one
/// that lost none. The steps are fine enough to match LAMMPS's thermo to 1e-10 on a perfect
/// lattice, where every pair of a shell rounds the same way (2^-32 missed it: 1.8e-10), and
/// coarse enough for the ranges: 2^27 for a force on one atom, 2^26 for the energy and virial
/// sums (the virial of the largest run, 864,000 atoms, is about 2e7).

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "neighbor_list.hpp"

namespace md {

/// What the kernel adds up besides forces: the pair energy and the virial, sum over pairs of
/// r_ij . f_ij (the pressure's pair part times 3V).
template <class Sum>
struct basic_pair_tally {
  Sum energy = 0;
  Sum virial = 0;
};
using pair_tally = basic_pair_tally<double>;

/// How a pair's contribution enters a sum of type `Sum`: as it is (double), or rounded to fixed
/// point (std::int64_t). Rounding to nearest is symmetric, so atom j gets exactly the negation of
/// what atom i gets.
template <class Sum>
struct sum_units {
  static double force(double value) { return value; }
  static double tally(double value) { return value; }
  static double force_value(double sum) { return sum; }
  static double tally_value(double sum) { return sum; }
};
template <>
struct sum_units<std::int64_t> {
  static constexpr double force_scale = 0x1p36;
  static constexpr double tally_scale = 0x1p37;
  static std::int64_t force(double value) { return rounded(value * force_scale); }
  static std::int64_t tally(double value) { return rounded(value * tally_scale); }
  static double force_value(std::int64_t sum) { return static_cast<double>(sum) / force_scale; }
  static double tally_value(std::int64_t sum) { return static_cast<double>(sum) / tally_scale; }

  /// `scaled` to the nearest integer, ties to even, as std::llrint does, without its library
  /// call (three per pair made --survive's steps a third slower): adding 1.5 * 2^52 leaves no
  /// bits below the units, and taking it away again is exact. Exact while |scaled| < 2^51:
  /// a pair's force below 2^15, its energy below 2^14 (atoms nearer than 0.6, a run that
  /// blew up).
  static std::int64_t rounded(double scaled) {
    constexpr double units_only = 0x1.8p52;
    return static_cast<std::int64_t>((scaled + units_only) - units_only);
  }
};

/// Adds the forces of the list's pairs with r < cutoff into `force` (3 per atom, every atom
/// of the system: a pair's j may be anyone's). Newton's third law: each pair is computed once
/// and acts on both atoms. With `Tally` the energy and virial are summed too; the steps that
/// print no thermo skip that work, as LAMMPS does.
template <bool Tally, class Sum = double>
basic_pair_tally<Sum> add_lj_forces(std::span<const double> x, const half_neighbor_list& list,
                                    double cutoff, std::type_identity_t<std::span<Sum>> force) {
  using units = sum_units<Sum>;
  const double cutoff_sq = cutoff * cutoff;
  const auto& shifts = list.shifts();
  const std::uint32_t* neighbors = list.neighbors().data();
  const double* pos = x.data();
  Sum* f = force.data();
  basic_pair_tally<Sum> tally;
  const atom_range range = list.range();
  for (std::size_t i = range.first; i < range.last; ++i) {
    const double xi = pos[3 * i], yi = pos[3 * i + 1], zi = pos[3 * i + 2];
    Sum fxi = 0, fyi = 0, fzi = 0;
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
      const Sum fx = units::force(dx * fpair);
      const Sum fy = units::force(dy * fpair);
      const Sum fz = units::force(dz * fpair);
      fxi += fx;
      fyi += fy;
      fzi += fz;
      f[3 * j] -= fx;
      f[3 * j + 1] -= fy;
      f[3 * j + 2] -= fz;
      if constexpr (Tally) {
        tally.energy += units::tally(r6inv * (4.0 * r6inv - 4.0));
        tally.virial += units::tally(r2 * fpair);
      }
    }
    f[3 * i] += fxi;
    f[3 * i + 1] += fyi;
    f[3 * i + 2] += fzi;
  }
  return tally;
}

}  // namespace md
