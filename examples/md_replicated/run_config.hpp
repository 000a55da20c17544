// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The parameters of a run. The defaults are LAMMPS's bench/in.lj.

namespace md {

struct run_config {
  int cells = 20;             // fcc cells per side: 4 * cells^3 atoms (20: 32000)
  long steps = 100;           // time steps after step 0
  long thermo_every = 10;     // thermo at step 0, every this many steps, and the last step;
                              // 0: at step 0 and the last step only (LAMMPS's default)
  double density = 0.8442;    // lattice fcc 0.8442
  double temperature = 1.44;  // velocity all create 1.44 87287 loop geom
  int seed = 87287;
  double dt = 0.005;        // LAMMPS's lj-units default timestep
  double cutoff = 2.5;      // pair_style lj/cut 2.5
  double skin = 0.3;        // neighbor 0.3 bin
  long rebuild_every = 20;  // neigh_modify delay 0 every 20 check no

  [[nodiscard]] double list_cutoff() const { return cutoff + skin; }
  [[nodiscard]] bool prints_thermo(long step) const {
    return step == 0 || step == steps || (thermo_every > 0 && step % thermo_every == 0);
  }
};

}  // namespace md
