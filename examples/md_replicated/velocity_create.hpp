// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Initial velocities as LAMMPS's `velocity all create T seed loop geom` makes them: each atom's
/// velocity depends only on its position and the seed, so any decomposition, any rank count
/// and any atom order give the same velocities.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "system.hpp"
#include "thermo.hpp"

namespace md {

/// Park and Miller's minimal standard generator (multiplier 16807, modulus 2^31 - 1) with
/// Schrage's factorisation, as LAMMPS's RanPark has it, reseeded per atom from its position.
class park_miller {
 public:
  /// Seeds from a Jenkins one-at-a-time hash of the integer seed's 4 bytes and the 24 bytes of
  /// the three coordinates, each byte read as a signed char (the hash LAMMPS uses), keeps 27
  /// bits of it (never 0) and discards the first 5 draws.
  void reset(std::int32_t seed, const double (&coord)[3]) {
    std::uint32_t hash = 0;
    const auto mix = [&hash](const void* data, std::size_t size) {
      const auto* bytes = static_cast<const signed char*>(data);
      for (std::size_t i = 0; i < size; ++i) {
        // A negative byte is sign-extended before the add, as in LAMMPS's `hash += str[i]`.
        hash += static_cast<std::uint32_t>(static_cast<std::int32_t>(bytes[i]));
        hash += hash << 10;
        hash ^= hash >> 6;
      }
    };
    mix(&seed, sizeof seed);
    mix(coord, sizeof coord);
    hash += hash << 3;
    hash ^= hash >> 11;
    hash += hash << 15;
    state_ = static_cast<std::int32_t>(hash & 0x7ffffffU);
    if (state_ == 0) state_ = 1;
    for (int i = 0; i < 5; ++i) (void)uniform();
  }

  /// The next draw in (0, 1).
  double uniform() {
    constexpr std::int32_t ia = 16807, im = 2147483647, iq = 127773, ir = 2836;
    const std::int32_t k = state_ / iq;
    state_ = ia * (state_ - k * iq) - ir * k;
    if (state_ < 0) state_ += im;
    return (1.0 / im) * state_;
  }

 private:
  std::int32_t state_ = 1;
};

/// Sets every velocity component to a uniform draw in [-1/2, 1/2) from the atom's own
/// generator, removes the centre-of-mass velocity and scales to `temperature` counted with
/// 3N - 3 degrees of freedom (LAMMPS's `velocity create` with its defaults mom yes, rot no,
/// dist uniform). Every sum runs in atom order, as a serial LAMMPS run sums.
inline void create_velocities(system& s, double temperature, std::int32_t seed) {
  const std::size_t n = s.atoms();
  park_miller random;
  for (std::size_t i = 0; i < n; ++i) {
    const double coord[3] = {s.x[3 * i], s.x[3 * i + 1], s.x[3 * i + 2]};
    random.reset(seed, coord);
    for (int d = 0; d < 3; ++d) s.v[3 * i + d] = random.uniform() - 0.5;
  }

  double momentum[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) momentum[d] += s.v[3 * i + d];
  }
  for (int d = 0; d < 3; ++d) momentum[d] /= static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) s.v[3 * i + d] -= momentum[d];
  }

  const double factor = std::sqrt(temperature / kinetic_temperature(s));
  for (double& component : s.v) component *= factor;
}

}  // namespace md
