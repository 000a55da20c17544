// SPDX-License-Identifier: MIT
#pragma once
// A site's summed mass mesh as it crosses the wide link: in pieces of a few x-planes, each
// piece its planes' flags then only the planes that hold anything (a site's particles touch
// little more than its slab, so about half the mesh crosses between two sites). Pieces of 256
// KiB stay under the eager size that wide_link.hpp gives the leaders' own wan job (1 MiB), so
// there none waits a round trip for the receiver's go-ahead (a layered stack's wide level keeps
// its own eager size, COMMX_TCP_EAGER, 64 KiB by default).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace nbody {

class mesh_pieces {
 public:
  static constexpr std::size_t piece_bytes = 256 * 1024;

  explicit mesh_pieces(std::size_t cells)
      : side_(static_cast<std::size_t>(std::llround(std::cbrt(static_cast<double>(cells))))),
        plane_(side_ * side_),
        planes_each_(std::max<std::size_t>(1, piece_bytes / (plane_ * sizeof(std::int64_t)))) {
    if (side_ * plane_ != cells) {
      throw std::invalid_argument(fmt::format("a mesh of {} cells is not a cube", cells));
    }
  }

  [[nodiscard]] std::size_t count() const { return (side_ + planes_each_ - 1) / planes_each_; }

  [[nodiscard]] std::vector<std::int64_t> pack(std::span<const std::int64_t> mesh,
                                               std::size_t piece) const {
    const auto [first, last] = planes_of(piece);
    std::vector<std::int64_t> packed(last - first, 0);
    for (std::size_t x = first; x < last; ++x) {
      const auto cells = mesh.subspan(x * plane_, plane_);
      if (std::any_of(cells.begin(), cells.end(), [](std::int64_t v) { return v != 0; })) {
        packed[x - first] = 1;
        packed.insert(packed.end(), cells.begin(), cells.end());
      }
    }
    return packed;
  }

  /// Adds a piece another site packed; refuses one whose size its flags do not explain.
  void add(std::span<std::int64_t> mesh, std::size_t piece, std::span<const std::int64_t> packed,
           int from) const {
    const auto [first, last] = planes_of(piece);
    const std::size_t flags = last - first;
    std::size_t flagged = 0;
    if (packed.size() >= flags) {
      for (std::size_t i = 0; i < flags; ++i) flagged += packed[i] != 0 ? 1 : 0;
    }
    if (packed.size() < flags || packed.size() != flags + flagged * plane_) {
      throw std::runtime_error(fmt::format(
          "site {} sent piece {} of the mesh as {} values, which are not {} plane flags and "
          "their planes",
          from, piece, packed.size(), flags));
    }
    std::size_t next = flags;
    for (std::size_t x = first; x < last; ++x) {
      if (packed[x - first] == 0) continue;
      for (std::size_t i = 0; i < plane_; ++i) mesh[x * plane_ + i] += packed[next + i];
      next += plane_;
    }
  }

 private:
  [[nodiscard]] std::pair<std::size_t, std::size_t> planes_of(std::size_t piece) const {
    const std::size_t first = piece * planes_each_;
    return {first, std::min(side_, first + planes_each_)};
  }

  std::size_t side_, plane_, planes_each_;
};

}  // namespace nbody
