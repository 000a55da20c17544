// SPDX-License-Identifier: MIT
// The parameters of the TreePM force split, shared by the mesh, the tree and the driver.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace nbody {

struct force_params {
  double box = 1.0;
  // The defaults, measured on the test (rms relative force error against Ewald for a
  // 1000-particle Plummer clump of scale 0.02): 7.0e-4 at theta 0.5, 4.2e-3 at 0.8, 4.1e-4 at
  // 0.3 (the mesh's and the cutoff's share, theta -> 0, is 3.4e-4). r_cut = 0.117 box gives 8
  // chain cells per side, so a rank's ghosts are a few cell layers, not the whole box. Release,
  // one core, tree build and walk: 250k particles/s on a 32^3 perturbed lattice and 39k/s on a
  // 30k Plummer clump of scale 0.05 (the previous monopole defaults, theta 0.2, mesh 32 and r_cut
  // 0.31 box, 3 cells per side: 15k/s and 7k/s).
  int mesh = 64;  // particle-mesh cells per side
  // r_s = split_cells * box / mesh (Gaussian force split, as GADGET-2). With TSC assignment the
  // mesh's share of the error is 3.4e-4 at 1.5 cells, 1.7e-4 at 2 (CIC's was 2.5e-3 and 1.1e-3);
  // 1.5 keeps r_cut small at no cost in the total error, which the tree then dominates.
  double split_cells = 1.5;
  // r_cut = cutoff_splits * r_s. At 5 the short-range force dropped at r_cut is 0.6% of a pair's
  // force (erfc(2.5) + 5 exp(-6.25) / sqrt(pi)); at 4.5 it is 1.8%.
  double cutoff_splits = 5.0;
  // Barnes-Hut opening angle, with monopoles and quadrupoles (monopoles alone needed 0.2 for the
  // 1e-3 target: 2.9e-3 at 0.5); 0.4 gives 4.7e-4 for ~1.5x the walk time of 0.5.
  double theta = 0.5;
  double softening = 0.0;  // Plummer softening of the short-range force
  int leaf_size = 8;       // most particles in a tree leaf

  double split_radius() const { return split_cells * box / mesh; }
  double cutoff() const { return cutoff_splits * split_radius(); }

  // Throws std::invalid_argument naming the parameter, its value and the rule it breaks.
  void validate() const {
    auto refuse = [](const std::string& what) {
      throw std::invalid_argument("nbody::force_params: " + what);
    };
    // Far outside this range the mesh's and the kernel's scales under- or overflow.
    if (!(box >= 1e-30 && box <= 1e30))
      refuse("box must be in [1e-30, 1e30], got " + std::to_string(box));
    // Below 8 cells the CIC deconvolution and the Gaussian filter leave nothing useful; above
    // 1024 the replicated mesh (8 GiB per array) no longer fits a rank.
    if (mesh < 8 || mesh > 1024)
      refuse("mesh must be in [8, 1024] cells per side, got " + std::to_string(mesh));
    if (!(std::isfinite(split_cells) && split_cells > 0))
      refuse("split_cells must be finite and positive, got " + std::to_string(split_cells));
    if (!(std::isfinite(cutoff_splits) && cutoff_splits > 0))
      refuse("cutoff_splits must be finite and positive, got " + std::to_string(cutoff_splits));
    if (!(theta > 0 && theta <= 1.5))
      refuse("theta must be in (0, 1.5], got " + std::to_string(theta));
    if (!(std::isfinite(softening) && softening >= 0))
      refuse("softening must be finite and non-negative, got " + std::to_string(softening));
    if (leaf_size < 1) refuse("leaf_size must be at least 1, got " + std::to_string(leaf_size));
    // The short-range sum visits a chain cell and its 26 neighbours; with fewer than 3 cells per
    // side a neighbour would be the same cell twice.
    const double per_side = std::floor(box / cutoff());
    // Above 256 per side the chain cells' index arrays alone outgrow a rank (and the count,
    // cubed, an int).
    if (!(per_side <= 256))
      refuse("the cutoff " + std::to_string(cutoff()) + " leaves more than 256 chain cells per " +
             "side (lower mesh or raise split_cells or cutoff_splits)");
    if (per_side < 3)
      refuse("the cutoff " + std::to_string(cutoff()) +
             " (cutoff_splits * split_cells * box / mesh)" + " leaves " +
             std::to_string(static_cast<int>(per_side)) +
             " chain cells per side; at least 3 are needed (raise mesh or lower split_cells or" +
             " cutoff_splits)");
  }
};

}  // namespace nbody
