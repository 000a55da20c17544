// SPDX-License-Identifier: MIT
// The reference: exact periodic accelerations and potentials by Ewald summation, O(N^2) in
// real space and O(N K) in k-space (through the structure factors), without softening.
//
// Convention, shared with the particle-mesh solver: gravity in a periodic box with a uniform
// neutralising background (no k = 0 force), and each source's potential averages to zero over
// the box. A particle's potential includes its own periodic images and its share of the
// background, but not itself: the k-space sum's own smooth cloud, -2 alpha m / sqrt(pi) at zero
// distance, is taken out again. The result does not depend on alpha.
#pragma once

#include <cmath>
#include <complex>
#include <cstddef>
#include <numbers>
#include <span>
#include <stdexcept>
#include <vector>

#include "particle.hpp"

namespace nbody {

inline void ewald_forces(double box, std::span<const particle> particles, std::span<vec3> acc,
                         std::span<double> pot) {
  const std::size_t n = particles.size();
  if (acc.size() != n || pot.size() != n)
    throw std::invalid_argument("nbody::ewald_forces: spans of different sizes");
  constexpr double pi = std::numbers::pi;
  // Real space keeps every image closer than one box length (all of them lie in the 27 boxes
  // around the minimum image); alpha L = 4.4 makes erfc(alpha L) ~ 1e-9 there. The k-space sum
  // then needs exp(-k^2 / 4 alpha^2) down to ~1e-9 too: |n|^2 <= 41.
  const double alpha = 4.4 / box;
  const double real_cut2 = box * box;
  constexpr int k_max = 6;
  constexpr int k_max2 = 41;
  const double volume = box * box * box;
  const double two_alpha_over_root_pi = 2 * alpha / std::sqrt(pi);
  double total_mass = 0;
  for (const particle& p : particles) total_mass += p.mass;

  for (std::size_t i = 0; i < n; ++i) {
    acc[i] = {0, 0, 0};
    pot[i] =
        two_alpha_over_root_pi * particles[i].mass + pi * total_mass / (alpha * alpha * volume);
  }

  // Real space: pairs (i, j >= i), each image once; i == j keeps only the other images.
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i; j < n; ++j) {
      vec3 d;
      for (int a = 0; a < 3; ++a) {
        d[a] = particles[i].pos[a] - particles[j].pos[a];
        d[a] -= box * std::round(d[a] / box);
      }
      for (int nx = -1; nx <= 1; ++nx) {
        for (int ny = -1; ny <= 1; ++ny) {
          for (int nz = -1; nz <= 1; ++nz) {
            if (i == j && nx == 0 && ny == 0 && nz == 0) continue;
            const double rx = d[0] + nx * box, ry = d[1] + ny * box, rz = d[2] + nz * box;
            const double r2 = rx * rx + ry * ry + rz * rz;
            if (r2 >= real_cut2) continue;
            const double r = std::sqrt(r2);
            const double tail = std::erfc(alpha * r) / r;
            const double f = (tail + two_alpha_over_root_pi * std::exp(-alpha * alpha * r2)) / r2;
            if (i == j) {
              // Opposite images pull equally and opposite: only the potential remains.
              pot[i] -= particles[i].mass * tail;
              continue;
            }
            pot[i] -= particles[j].mass * tail;
            pot[j] -= particles[i].mass * tail;
            const double fi = particles[j].mass * f, fj = particles[i].mass * f;
            acc[i][0] -= fi * rx;
            acc[i][1] -= fi * ry;
            acc[i][2] -= fi * rz;
            acc[j][0] += fj * rx;
            acc[j][1] += fj * ry;
            acc[j][2] += fj * rz;
          }
        }
      }
    }
  }

  // k-space: phases exp(i k_a x_a) per axis and particle, so each k costs one complex product.
  const double k_unit = 2 * pi / box;
  const std::size_t width = 2 * k_max + 1;
  std::vector<std::complex<double>> phase(n * 3 * width);
  auto phase_of = [&](std::size_t p, int axis, int m) -> std::complex<double>& {
    return phase[(p * 3 + axis) * width + static_cast<std::size_t>(m + k_max)];
  };
  for (std::size_t p = 0; p < n; ++p) {
    for (int axis = 0; axis < 3; ++axis) {
      for (int m = -k_max; m <= k_max; ++m) {
        const double angle = k_unit * m * particles[p].pos[axis];
        phase_of(p, axis, m) = {std::cos(angle), std::sin(angle)};
      }
    }
  }
  std::vector<std::complex<double>> e(n);
  for (int mx = 0; mx <= k_max; ++mx) {
    for (int my = -k_max; my <= k_max; ++my) {
      for (int mz = -k_max; mz <= k_max; ++mz) {
        // Half of k-space: k and -k add the same real contribution, so count each pair once.
        const bool upper_half = mx > 0 || (mx == 0 && (my > 0 || (my == 0 && mz > 0)));
        const int m2 = mx * mx + my * my + mz * mz;
        if (!upper_half || m2 > k_max2) continue;
        const double kx = k_unit * mx, ky = k_unit * my, kz = k_unit * mz;
        const double k2 = kx * kx + ky * ky + kz * kz;
        const double weight = 2 * 4 * pi / volume * std::exp(-k2 / (4 * alpha * alpha)) / k2;
        std::complex<double> structure = 0;
        for (std::size_t p = 0; p < n; ++p) {
          e[p] = phase_of(p, 0, mx) * phase_of(p, 1, my) * phase_of(p, 2, mz);
          structure += particles[p].mass * e[p];
        }
        for (std::size_t p = 0; p < n; ++p) {
          // phi = -w Re[e^{ik.r} conj S], a = -grad phi = -w k Im[e^{ik.r} conj S]
          const std::complex<double> c = e[p] * std::conj(structure);
          pot[p] -= weight * c.real();
          acc[p][0] -= weight * kx * c.imag();
          acc[p][1] -= weight * ky * c.imag();
          acc[p][2] -= weight * kz * c.imag();
        }
      }
    }
  }
}

}  // namespace nbody
