// SPDX-License-Identifier: MIT
// The chain grid: the box cut into cubes at least r_cut wide, so that every source within r_cut
// of a target lies in the target's cube or one of its 26 neighbours. It is what makes the
// short-range force independent of how particles are spread over ranks: each cube's tree is
// built from the cube's particles alone.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>

#include "force_params.hpp"
#include "particle.hpp"

namespace nbody {

struct chain_grid {
  explicit chain_grid(const force_params& params) : box_(params.box) {
    params.validate();
    per_side_ = static_cast<int>(std::floor(params.box / params.cutoff()));
    // The quotient may round up across an integer: the cube must never be narrower than r_cut.
    if (params.box / per_side_ < params.cutoff()) --per_side_;
    if (per_side_ < 3)
      throw std::invalid_argument("nbody::chain_grid: fewer than 3 chain cells per side");
    side_ = params.box / per_side_;
  }

  int per_side() const { return per_side_; }
  double cell_side() const { return side_; }
  int cells() const { return per_side_ * per_side_ * per_side_; }

  // A pure function of the position's bits, so every rank puts a particle in the same cube.
  std::array<int, 3> cell_of(const vec3& pos) const {
    std::array<int, 3> cell{};
    for (int d = 0; d < 3; ++d) {
      // Clamped before the cast: a position outside the box (or not a number) must not reach
      // an int conversion it does not fit.
      const double c = std::floor(pos[d] / side_);
      cell[d] = c >= 0 ? static_cast<int>(std::min(c, per_side_ - 1.0)) : 0;
    }
    return cell;
  }

  int index(std::array<int, 3> cell) const {
    for (int& c : cell) c = wrap(c);
    return (cell[0] * per_side_ + cell[1]) * per_side_ + cell[2];
  }

  int wrap(int c) const {
    c %= per_side_;
    return c < 0 ? c + per_side_ : c;
  }

  // How far a cube index c lies outside [0, per_side) in whole boxes: its particles, held at
  // their positions in [0, box), appear to the target shifted by this many box lengths.
  double image_shift(int c) const {
    if (c < 0) return -box_;
    if (c >= per_side_) return box_;
    return 0.0;
  }

 private:
  double box_;
  int per_side_ = 0;
  double side_ = 0;
};

}  // namespace nbody
