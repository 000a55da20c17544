// SPDX-License-Identifier: MIT
#pragma once
// GreeM's decomposition cut to one dimension: the box is cut along x into one block per rank,
// ranks of one site holding consecutive blocks, so a site's blocks make its slab. The short-range
// force needs, around each of a rank's particles, the whole chain cells within one cell
// (short_range_tree.hpp), so a rank's ghosts are every particle in the chain cells that meet its
// block widened by one cell. Edges move to balance the measured cost; the forces do not depend
// on where they are.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "force_params.hpp"
#include "particle.hpp"
#include "short_range_tree.hpp"

namespace nbody {

class decomposition {
 public:
  decomposition(const force_params& params, int ranks)
      : box_(params.box), grid_(params), edges_(static_cast<std::size_t>(ranks) + 1) {
    for (int r = 0; r <= ranks; ++r) edges_[index(r)] = box_ * r / ranks;
    refresh_needed_cells();
  }

  [[nodiscard]] int ranks() const { return static_cast<int>(edges_.size()) - 1; }
  [[nodiscard]] double lower(int rank) const { return edges_[index(rank)]; }
  [[nodiscard]] double upper(int rank) const { return edges_[index(rank) + 1]; }
  [[nodiscard]] std::span<const double> edges() const { return edges_; }

  /// The rank whose block holds x (x in [0, box)).
  [[nodiscard]] int owner(double x) const {
    const auto after = std::upper_bound(edges_.begin() + 1, edges_.end() - 1, x);
    return static_cast<int>(after - edges_.begin()) - 1;
  }

  /// True if `rank` needs a particle at `pos` as a ghost or as its own.
  [[nodiscard]] bool needs(int rank, const vec3& pos) const {
    const int cell = grid_.cell_of(pos)[0];
    return needed_[index(rank) * columns() + static_cast<std::size_t>(cell)] != 0;
  }

  /// Moves the edges towards equal cost: `cost_histogram` is the measured cost per bin of x
  /// (bins of equal width over the box), identical on every rank so that every rank moves the
  /// edges alike. Half the way each time, so that noise in the timings does not make them swing.
  void balance(std::span<const double> cost_histogram) {
    const std::size_t bins = cost_histogram.size();
    double total = 0;
    for (double c : cost_histogram) total += c;
    if (bins == 0 || !(total > 0)) return;
    const double bin_width = box_ / static_cast<double>(bins);
    double below = 0;
    std::size_t bin = 0;
    for (int r = 1; r < ranks(); ++r) {
      const double wanted = total * r / ranks();
      while (bin < bins && below + cost_histogram[bin] < wanted) below += cost_histogram[bin++];
      double target = box_;
      if (bin < bins) {
        const double inside = cost_histogram[bin] > 0 ? (wanted - below) / cost_histogram[bin] : 0;
        target = (static_cast<double>(bin) + inside) * bin_width;
      }
      edges_[index(r)] = 0.5 * (edges_[index(r)] + target);
    }
    // Keep blocks in order and not empty of width, whatever the histogram said.
    const double least = box_ * 1e-6;
    for (int r = 1; r < ranks(); ++r) {
      edges_[index(r)] = std::clamp(edges_[index(r)], edges_[index(r) - 1] + least, box_);
    }
    for (int r = ranks() - 1; r >= 1; --r) {
      edges_[index(r)] = std::min(edges_[index(r)], edges_[index(r) + 1] - least);
    }
    refresh_needed_cells();
  }

  [[nodiscard]] const chain_grid& grid() const { return grid_; }

 private:
  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }
  [[nodiscard]] std::size_t columns() const { return static_cast<std::size_t>(grid_.per_side()); }

  // The chain-cell columns (x index) whose particles each rank must hold whole: those that meet
  // its block widened by one cell on each side, periodically.
  void refresh_needed_cells() {
    const std::size_t n = columns();
    needed_.assign(edges_.size() * n, 0);
    const double side = grid_.cell_side();
    for (int r = 0; r < ranks(); ++r) {
      const auto first = static_cast<long>(std::floor((lower(r) - side) / side));
      const auto last = static_cast<long>(std::floor((upper(r) + side) / side));
      const long count = std::min<long>(last - first + 1, static_cast<long>(n));
      for (long c = 0; c < count; ++c) {
        const long wrapped =
            ((first + c) % static_cast<long>(n) + static_cast<long>(n)) % static_cast<long>(n);
        needed_[index(r) * n + static_cast<std::size_t>(wrapped)] = 1;
      }
    }
  }

  double box_;
  chain_grid grid_;
  std::vector<double> edges_;
  std::vector<unsigned char> needed_;
};

}  // namespace nbody
