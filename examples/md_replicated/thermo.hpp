// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The thermo line of LAMMPS's default `thermo_style one` (Step Temp E_pair E_mol TotEng Press),
/// computed with LAMMPS's formulas in LAMMPS's order, so values agree to round-off.

#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "system.hpp"

namespace md {

/// 3N - 3: the centre of mass does not move (LAMMPS's compute temp, extra_dof = 3).
[[nodiscard]] inline double degrees_of_freedom(std::size_t atoms) {
  return 3.0 * static_cast<double>(atoms) - 3.0;
}

/// T = sum(m v^2) / dof, multiplied by 1/dof rather than divided (LAMMPS's tfactor).
[[nodiscard]] inline double kinetic_temperature(const system& s) {
  double sum = 0;
  for (std::size_t i = 0; i < s.atoms(); ++i) {
    const double vx = s.v[3 * i], vy = s.v[3 * i + 1], vz = s.v[3 * i + 2];
    sum += vx * vx + vy * vy + vz * vz;
  }
  const double tfactor = 1.0 / degrees_of_freedom(s.atoms());
  return sum * tfactor;
}

struct thermo_row {
  long step = 0;
  double temp = 0;
  double e_pair = 0;   // per atom
  double e_mol = 0;    // no bonds in an LJ fluid: always 0
  double tot_eng = 0;  // per atom
  double press = 0;
};

/// The columns LAMMPS prints, in its order of operations. `pair_energy` and `virial` (sum over
/// pairs of r_ij . f_ij) are totals over the whole system.
[[nodiscard]] inline thermo_row make_thermo_row(long step, const system& s, double pair_energy,
                                                double virial) {
  const double n = static_cast<double>(s.atoms());
  const double dof = degrees_of_freedom(s.atoms());
  thermo_row row;
  row.step = step;
  row.temp = kinetic_temperature(s);
  row.e_pair = pair_energy / n;
  const double kinetic = row.temp * (0.5 * dof) / n;
  row.tot_eng = kinetic + row.e_pair;
  const double inv_volume = 1.0 / s.volume();
  row.press = (dof * row.temp + virial) / 3.0 * inv_volume;
  return row;
}

[[nodiscard]] inline std::string thermo_header() {
  return fmt::format("{:>8} {:>22} {:>22} {:>6} {:>22} {:>22}\n", "Step", "Temp", "E_pair", "E_mol",
                     "TotEng", "Press");
}

/// 15 significant digits, as the reference tables, so runs can be compared as text.
[[nodiscard]] inline std::string format_thermo(const thermo_row& r) {
  return fmt::format("{:>8} {:>22.15g} {:>22.15g} {:>6.15g} {:>22.15g} {:>22.15g}\n", r.step,
                     r.temp, r.e_pair, r.e_mol, r.tot_eng, r.press);
}

}  // namespace md
