// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A half Verlet neighbour list built by cell binning, over periodic images without ghost
/// atoms: each pair (i, j > i) is stored once, with the periodic image of j it was found at.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "system.hpp"

namespace md {

/// The atoms [first, last) whose pairs one rank computes.
struct atom_range {
  std::size_t first = 0;
  std::size_t last = 0;
};

/// For each atom i of its range, the atoms j > i whose nearest image lies within the list
/// cutoff, each stored with the image it was found at. Pairs keep their image until the next
/// build, so positions may drift out of the box between builds (as LAMMPS's do).
///
/// Neighbour entries pack j and the image code into one 32-bit word (j << 5 | code): the
/// kernel's inner loop then reads 4 bytes per pair, and the 27 image shifts fit in one
/// cache line's worth of table.
class half_neighbor_list {
 public:
  static constexpr int image_bits = 5;
  static constexpr std::uint32_t image_mask = (1U << image_bits) - 1;
  static constexpr std::size_t max_atoms = std::size_t{1} << (32 - image_bits);
  /// The image code of j itself (no shift).
  static constexpr int home_image = 13;

  /// Builds the list of atoms `range` over every atom of `s`. Positions must lie in
  /// [0, box_length): wrap them first.
  /// @throws std::invalid_argument if the box is smaller than twice the cutoff (a pair would
  /// have two images in range), or a position is outside the box.
  void build(const system& s, double list_cutoff, atom_range range) {
    const double length = s.box_length;
    const std::size_t n = s.atoms();
    if (n > max_atoms) throw std::invalid_argument("neighbour list: too many atoms");
    if (!(length >= 2 * list_cutoff)) {
      throw std::invalid_argument("neighbour list: the box side " + std::to_string(length) +
                                  " is less than twice the list cutoff " +
                                  std::to_string(list_cutoff));
    }
    range_ = range;
    for (int code = 0; code < 27; ++code) {
      shift_[code][0] = (code % 3 - 1) * length;
      shift_[code][1] = (code / 3 % 3 - 1) * length;
      shift_[code][2] = (code / 9 - 1) * length;
    }
    bin(s, list_cutoff);

    const double cutoff_sq = list_cutoff * list_cutoff;
    first_.assign(range.last - range.first + 1, 0);
    neighbors_.clear();  // keeps its capacity: later builds do not reallocate
    for (std::size_t i = range.first; i < range.last; ++i) {
      first_[i - range.first] = neighbors_.size();
      const double xi = s.x[3 * i], yi = s.x[3 * i + 1], zi = s.x[3 * i + 2];
      const std::array<int, 3> home = cell_of(xi, yi, zi);
      for (int dz = -1; dz <= 1; ++dz) {
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            // Which image of the neighbouring cell: wrapping a cell index across a face means
            // looking at the atoms of that cell shifted by one box length.
            int image[3];
            const int cell = neighbor_cell(home, {dx, dy, dz}, image);
            const int code = (image[0] + 1) + 3 * (image[1] + 1) + 9 * (image[2] + 1);
            const double* shift = shift_[code];
            for (std::uint32_t k = cell_first_[cell]; k < cell_first_[cell + 1]; ++k) {
              const std::uint32_t j = binned_[k];
              if (j <= i) continue;
              const double ddx = xi - s.x[3 * j] - shift[0];
              const double ddy = yi - s.x[3 * j + 1] - shift[1];
              const double ddz = zi - s.x[3 * j + 2] - shift[2];
              if (ddx * ddx + ddy * ddy + ddz * ddz < cutoff_sq) {
                neighbors_.push_back(j << image_bits | static_cast<std::uint32_t>(code));
              }
            }
          }
        }
      }
    }
    first_.back() = neighbors_.size();
  }

  [[nodiscard]] atom_range range() const { return range_; }
  [[nodiscard]] std::size_t pairs() const { return neighbors_.size(); }
  /// Index into neighbors() of atom i's first neighbour; i in range(), or range().last.
  [[nodiscard]] std::size_t first(std::size_t i) const { return first_[i - range_.first]; }
  [[nodiscard]] const std::vector<std::uint32_t>& neighbors() const { return neighbors_; }
  /// The shift to subtract from j's position for a neighbour entry's image code.
  [[nodiscard]] const double (&shifts() const)[27][3] { return shift_; }

 private:
  // Cells at least one list cutoff wide, so all neighbours are in the 27 cells around an
  // atom's own; with fewer than three cells a side the same cell is visited at several
  // images, which the box >= 2 * cutoff condition keeps from finding a pair twice.
  void bin(const system& s, double list_cutoff) {
    cells_per_side_ = std::max(1, static_cast<int>(std::floor(s.box_length / list_cutoff)));
    cells_per_side_ = std::min(cells_per_side_, 1024);
    cell_scale_ = cells_per_side_ / s.box_length;
    const std::size_t n = s.atoms();
    const auto cells =
        static_cast<std::size_t>(cells_per_side_) * cells_per_side_ * cells_per_side_;
    cell_first_.assign(cells + 1, 0);
    std::vector<std::uint32_t> cell_of_atom(n);
    for (std::size_t i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        const double x = s.x[3 * i + d];
        if (!(x >= 0 && x < s.box_length)) {
          throw std::invalid_argument("neighbour list: atom " + std::to_string(i) +
                                      " lies outside the box");
        }
      }
      const auto c = cell_of(s.x[3 * i], s.x[3 * i + 1], s.x[3 * i + 2]);
      cell_of_atom[i] = static_cast<std::uint32_t>(index(c));
      ++cell_first_[cell_of_atom[i] + 1];
    }
    for (std::size_t c = 0; c < cells; ++c) cell_first_[c + 1] += cell_first_[c];
    binned_.resize(n);
    std::vector<std::uint32_t> fill(cell_first_.begin(), cell_first_.end() - 1);
    // Atoms stay in index order within a cell, so the list is the same on every rank.
    for (std::size_t i = 0; i < n; ++i)
      binned_[fill[cell_of_atom[i]]++] = static_cast<std::uint32_t>(i);
  }

  [[nodiscard]] std::array<int, 3> cell_of(double x, double y, double z) const {
    const auto along = [this](double coord) {
      return std::min(static_cast<int>(coord * cell_scale_), cells_per_side_ - 1);
    };
    return {along(x), along(y), along(z)};
  }

  [[nodiscard]] std::size_t index(const std::array<int, 3>& c) const {
    return (static_cast<std::size_t>(c[2]) * cells_per_side_ + c[1]) * cells_per_side_ + c[0];
  }

  [[nodiscard]] int neighbor_cell(const std::array<int, 3>& home, const std::array<int, 3>& step,
                                  int (&image)[3]) const {
    std::array<int, 3> c{};
    for (int d = 0; d < 3; ++d) {
      c[d] = home[d] + step[d];
      image[d] = 0;
      if (c[d] < 0) {
        c[d] += cells_per_side_;
        image[d] = -1;
      } else if (c[d] >= cells_per_side_) {
        c[d] -= cells_per_side_;
        image[d] = 1;
      }
    }
    return static_cast<int>(index(c));
  }

  atom_range range_;
  double shift_[27][3] = {};
  int cells_per_side_ = 1;
  double cell_scale_ = 0;
  std::vector<std::uint32_t> cell_first_;  // atoms of cell c: binned_[cell_first_[c], ...[c+1])
  std::vector<std::uint32_t> binned_;
  std::vector<std::size_t> first_;
  std::vector<std::uint32_t> neighbors_;
};

}  // namespace md
