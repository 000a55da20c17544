// SPDX-License-Identifier: MIT
// The short-range force: a Barnes-Hut tree of monopoles and quadrupoles per chain cell, summed
// over a target's cell and its 26 neighbours, with GADGET-2's erfc-truncated, Plummer-softened
// kernel.
//
// The result for a target is bitwise the same whatever other particles the caller holds and in
// whatever order: each chain cell's tree depends only on that cell's particles (sorted by id),
// and the sum visits cells, nodes and particles in a fixed order. The caller must hold the
// target's chain cell and its 26 neighbours whole.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <stdexcept>
#include <vector>

#include "chain_grid.hpp"
#include "force_params.hpp"
#include "particle.hpp"

namespace nbody {

// The pair kernel. With u = r / (2 r_s) and s = sqrt(r^2 + eps^2) the potential is
//   phi(r) = -m erfc(u) / s,
// and the acceleration is its negative gradient (so the energy is conserved):
//   a = -m (r_target - r_source) [erfc(u) / s^3 + exp(-u^2) / (sqrt(pi) r_s s r)],
// GADGET-2's m / r^2 [erfc(u) + r / (r_s sqrt(pi)) exp(-u^2)] when eps = 0.
// erfc(u) and exp(-u^2) come from tables in r, linearly interpolated: std::erfc and std::exp
// were two thirds of the walk's time. 4096 intervals up to r_cut keep the interpolation error
// below 1e-7 of the unscreened pull (the Gaussian and erfc vary on the scale r_s = r_cut / 5).
//
// A tree node pulls through its monopole and quadrupole about its centre of mass (the dipole
// vanishes there). For a radial kernel phi(r), with g1 = phi' / r, g2 = g1' / r, g3 = g2' / r,
// the derivatives of phi(|R|) are
//   d_i phi = g1 R_i,   d_ij phi = g1 delta_ij + g2 R_i R_j,
//   d_ijk phi = g2 (delta_ij R_k + delta_ik R_j + delta_jk R_i) + g3 R_i R_j R_k,
// and the Taylor series of sum_k m_k phi(|R - x_k|) in the offsets x_k from the centre of mass,
// with S_ij = sum m x_i x_j and T = trace S, gives at R = target - centre of mass
//   Phi = M phi + (T g1 + g2 R.S.R) / 2,
//   a   = -M g1 R - g2 S R - R (T g2 + g3 R.S.R) / 2.
// The traceless part Q = 3 S - T I alone would do for 1/r, whose Laplacian 3 g1 + r^2 g2
// vanishes; the split kernel's does not (it is 4 pi times the Gaussian cloud), so the trace is
// kept: the node stores the whole second moment S. For phi = -erfc(u) / s, with c = 1 /
// (sqrt(pi) r_s), G = exp(-u^2), E = erfc(u) and h = 1 / (2 r_s^2):
//   g1 =  c G / (r s) + E / s^3,
//   g2 = -c G [h / (r s) + 1 / (r^3 s) + 2 / (r s^3)] - 3 E / s^5,
//   g3 =  c G [h^2 / (r s) + 2 h / (r^3 s) + 3 h / (r s^3) + 3 / (r^5 s) + 3 / (r^3 s^3)
//              + 9 / (r s^5)] + 15 E / s^7,
// which are 1 / r^3, -3 / r^5 and 15 / r^7 for Newton (c = 0, E = 1, s = r).
struct short_range_kernel {
  static constexpr int intervals = 4096;

  explicit short_range_kernel(const force_params& params)
      : gaussian_factor(1.0 / (std::sqrt(std::numbers::pi) * params.split_radius())),
        gaussian_slope(0.5 / (params.split_radius() * params.split_radius())),
        softening2(params.softening * params.softening),
        cutoff2(params.cutoff() * params.cutoff()),
        per_interval(intervals / params.cutoff()) {
    const double half_inverse_split = 0.5 / params.split_radius();
    tail.resize(intervals + 2);
    gaussian.resize(intervals + 2);
    for (int i = 0; i < intervals + 2; ++i) {
      const double u = (i / per_interval) * half_inverse_split;
      tail[i] = std::erfc(u);
      gaussian[i] = std::exp(-u * u);
    }
  }

  // The kernel's pieces at r^2 < r_cut^2: r, the softened s, erfc(u) and exp(-u^2), u = r / 2 r_s,
  // interpolated in the tables.
  struct sample {
    double r, s, s2, tail, gaussian;
  };
  [[nodiscard]] sample at(double r2) const {
    const double s2 = r2 + softening2;
    const double r = std::sqrt(r2);
    const double x = r * per_interval;
    const int i = static_cast<int>(x);
    const double f = x - i;
    return {r, std::sqrt(s2), s2, tail[i] + f * (tail[i + 1] - tail[i]),
            gaussian[i] + f * (gaussian[i + 1] - gaussian[i])};
  }

  // Adds the pull of mass m at separation d = target - source; nothing beyond r_cut.
  void add(double m, double dx, double dy, double dz, double r2, double& ax, double& ay, double& az,
           double& phi) const {
    if (!(r2 < cutoff2)) return;       // and a NaN: it must not reach the tables
    if (r2 + softening2 == 0) return;  // coincident and unsoftened: no finite answer
    const sample k = at(r2);
    phi -= m * k.tail / k.s;
    if (r2 == 0) return;  // softened and coincident: a potential but no direction
    const double pull = m * (k.tail / (k.s2 * k.s) + k.gaussian * gaussian_factor / (k.s * k.r));
    ax -= pull * dx;
    ay -= pull * dy;
    az -= pull * dz;
  }

  // A node's second moment about its centre of mass: xx, xy, xz, yy, yz, zz.
  using second_moment = std::array<double, 6>;

  // Adds the monopole and quadrupole pull of a node of mass m and second moment q at separation
  // d = target - centre of mass, r2 = |d|^2 > 0 (the walk never accepts a node the target is
  // in); nothing beyond r_cut.
  void add_node(double m, const second_moment& q, double dx, double dy, double dz, double r2,
                double& ax, double& ay, double& az, double& phi) const {
    if (!(r2 < cutoff2)) return;  // and a NaN: it must not reach the tables
    const sample k = at(r2);
    const double r = k.r, s = k.s, e = k.tail;
    const double cg = gaussian_factor * k.gaussian;
    const double h = gaussian_slope;
    const double ir = 1 / r, is = 1 / s;
    const double ir2 = ir * ir, is2 = is * is;
    const double a1 = ir * is;   // 1 / (r s)
    const double a3 = a1 * ir2;  // 1 / (r^3 s)
    const double b3 = a1 * is2;  // 1 / (r s^3)
    const double is3 = is * is2, is5 = is3 * is2;
    const double g1 = cg * a1 + e * is3;
    const double g2 = -cg * (h * a1 + a3 + 2 * b3) - 3 * e * is5;
    const double g3 =
        cg * (h * h * a1 + 2 * h * a3 + 3 * h * b3 + 3 * a3 * ir2 + 3 * a3 * is2 + 9 * b3 * is2) +
        15 * e * is5 * is2;
    const double sx = q[0] * dx + q[1] * dy + q[2] * dz;
    const double sy = q[1] * dx + q[3] * dy + q[4] * dz;
    const double sz = q[2] * dx + q[4] * dy + q[5] * dz;
    const double rsr = dx * sx + dy * sy + dz * sz;
    const double trace = q[0] + q[3] + q[5];
    phi += 0.5 * (trace * g1 + g2 * rsr) - m * e * is;
    const double radial = m * g1 + 0.5 * (trace * g2 + g3 * rsr);
    ax -= radial * dx + g2 * sx;
    ay -= radial * dy + g2 * sy;
    az -= radial * dz + g2 * sz;
  }

  double gaussian_factor;
  double gaussian_slope;  // 1 / (2 r_s^2): G' = -r G / (2 r_s^2)
  double softening2;
  double cutoff2;
  double per_interval;
  std::vector<double> tail;      // erfc(r / 2 r_s) at r = i / per_interval
  std::vector<double> gaussian;  // exp(-r^2 / 4 r_s^2) there
};

class short_range_tree {
 public:
  short_range_tree(const force_params& params, std::span<const particle> sources)
      : grid_(params),
        kernel_(params),
        theta_(params.theta),
        leaf_size_(static_cast<std::size_t>(params.leaf_size)) {
    const int cells = grid_.cells();
    // Bucket the sources by chain cell (counting sort), then sort each cell by id: the order the
    // caller passed them in must not matter.
    std::vector<int> cell_of_source(sources.size());
    std::vector<std::size_t> first(static_cast<std::size_t>(cells) + 1, 0);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      cell_of_source[i] = grid_.index(grid_.cell_of(sources[i].pos));
      ++first[cell_of_source[i] + 1];
    }
    for (int c = 0; c < cells; ++c) first[c + 1] += first[c];
    std::vector<body> bodies(sources.size());
    {
      std::vector<std::size_t> fill(first.begin(), first.end() - 1);
      for (std::size_t i = 0; i < sources.size(); ++i) {
        const particle& p = sources[i];
        bodies[fill[cell_of_source[i]]++] = body{p.pos, p.mass, p.id};
      }
    }
    scratch_.resize(bodies.size());
    cell_nodes_.assign(static_cast<std::size_t>(cells) + 1, 0);
    nodes_.reserve(2 * bodies.size() / std::max<std::size_t>(leaf_size_, 1) + cells + 8);
    for (int c = 0; c < cells; ++c) {
      cell_nodes_[c] = static_cast<std::uint32_t>(nodes_.size());
      const auto begin = bodies.begin() + static_cast<std::ptrdiff_t>(first[c]);
      const auto end = bodies.begin() + static_cast<std::ptrdiff_t>(first[c + 1]);
      if (begin == end) continue;
      std::sort(begin, end, [](const body& a, const body& b) { return a.id < b.id; });
      // Equal ids would make the order (and so the bits) depend on the input's order.
      if (std::adjacent_find(begin, end,
                             [](const body& a, const body& b) { return a.id == b.id; }) != end)
        throw std::invalid_argument("nbody::short_range_tree: two sources share an id");
      const int cz = c % grid_.per_side(), cy = (c / grid_.per_side()) % grid_.per_side(),
                cx = c / (grid_.per_side() * grid_.per_side());
      const double side = grid_.cell_side();
      const vec3 centre{(cx + 0.5) * side, (cy + 0.5) * side, (cz + 0.5) * side};
      build(bodies, first[c], first[c + 1], centre, 0.5 * side, 0);
    }
    cell_nodes_[cells] = static_cast<std::uint32_t>(nodes_.size());
    scratch_.clear();
    scratch_.shrink_to_fit();
    x_.resize(bodies.size());
    y_.resize(bodies.size());
    z_.resize(bodies.size());
    m_.resize(bodies.size());
    id_.resize(bodies.size());
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      x_[i] = bodies[i].pos[0];
      y_[i] = bodies[i].pos[1];
      z_[i] = bodies[i].pos[2];
      m_[i] = bodies[i].mass;
      id_[i] = bodies[i].id;
    }
  }

  // ADDS the short-range acceleration and potential of every target.
  void accelerate(std::span<const particle> targets, std::span<vec3> acc,
                  std::span<double> pot) const {
    if (acc.size() != targets.size() || pot.size() != targets.size())
      throw std::invalid_argument("nbody::short_range_tree::accelerate: spans of different sizes");
    for (std::size_t t = 0; t < targets.size(); ++t) {
      const particle& target = targets[t];
      const std::array<int, 3> home = grid_.cell_of(target.pos);
      double ax = 0, ay = 0, az = 0, phi = 0;
      for (int dx = -1; dx <= 1; ++dx) {
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dz = -1; dz <= 1; ++dz) {
            const std::array<int, 3> cell{home[0] + dx, home[1] + dy, home[2] + dz};
            // The target seen from the neighbour's frame, so the sources keep their own bits.
            const vec3 seen{target.pos[0] - grid_.image_shift(cell[0]),
                            target.pos[1] - grid_.image_shift(cell[1]),
                            target.pos[2] - grid_.image_shift(cell[2])};
            const int c = grid_.index(cell);
            walk(cell_nodes_[c], cell_nodes_[c + 1], seen, target.id, ax, ay, az, phi);
          }
        }
      }
      acc[t][0] += ax;
      acc[t][1] += ay;
      acc[t][2] += az;
      pot[t] += phi;
    }
  }

  std::size_t node_count() const { return nodes_.size(); }

 private:
  struct body {
    vec3 pos;
    double mass;
    std::uint64_t id;
  };

  // Nodes are stored depth first, children in octant order; `skip` is the node after the
  // subtree, so the walk needs no stack.
  struct node {
    vec3 com;
    double mass;
    short_range_kernel::second_moment quad;  // sum m (x - com)(x - com), about com
    vec3 lo, hi;  // bounding box of the node's particles (tighter than its octant)
    // The opening criterion: the node pulls as a whole only from beyond size / theta plus the
    // offset of its centre of mass from its box's centre (a lopsided node is opened sooner).
    // That offset halves the rms error at theta 0.5 on the test clump for ~1/3 more work.
    double open2;
    std::uint32_t first, count, skip;
    bool leaf;
  };

  struct moments {
    double mass = 0;
    vec3 weighted{0, 0, 0};  // sum of m x, summed children in octant order
    vec3 lo{0, 0, 0}, hi{0, 0, 0};
  };

  static constexpr int max_depth = 48;  // coincident particles end in a leaf, however many

  moments build(std::vector<body>& bodies, std::size_t begin, std::size_t end, const vec3& centre,
                double half, int depth) {
    const std::size_t at = nodes_.size();
    nodes_.push_back(node{});
    moments sum;
    sum.lo = sum.hi = bodies[begin].pos;
    const bool leaf = end - begin <= leaf_size_ || depth >= max_depth;
    if (leaf) {
      for (std::size_t i = begin; i < end; ++i) {
        const body& b = bodies[i];
        sum.mass += b.mass;
        for (int d = 0; d < 3; ++d) {
          sum.weighted[d] += b.mass * b.pos[d];
          sum.lo[d] = std::min(sum.lo[d], b.pos[d]);
          sum.hi[d] = std::max(sum.hi[d], b.pos[d]);
        }
      }
      finish(at, sum);
      // The second moment in id order, about the centre of mass just found.
      short_range_kernel::second_moment& q = nodes_[at].quad;
      const vec3 com = nodes_[at].com;
      for (std::size_t i = begin; i < end; ++i) {
        const body& b = bodies[i];
        const double x = b.pos[0] - com[0], y = b.pos[1] - com[1], z = b.pos[2] - com[2];
        add_outer(q, b.mass, x, y, z);
      }
    } else {
      // Stable partition into octants: the id order within each child is kept.
      std::array<std::size_t, 9> start{};
      auto octant = [&](const body& b) {
        return (b.pos[0] >= centre[0] ? 4 : 0) | (b.pos[1] >= centre[1] ? 2 : 0) |
               (b.pos[2] >= centre[2] ? 1 : 0);
      };
      for (std::size_t i = begin; i < end; ++i) ++start[octant(bodies[i]) + 1];
      for (int o = 0; o < 8; ++o) start[o + 1] += start[o];
      std::array<std::size_t, 8> fill{};
      for (int o = 0; o < 8; ++o) fill[o] = begin + start[o];
      for (std::size_t i = begin; i < end; ++i) scratch_[fill[octant(bodies[i])]++] = bodies[i];
      std::copy(scratch_.begin() + static_cast<std::ptrdiff_t>(begin),
                scratch_.begin() + static_cast<std::ptrdiff_t>(end),
                bodies.begin() + static_cast<std::ptrdiff_t>(begin));
      const double quarter = 0.5 * half;
      std::array<std::uint32_t, 8> child_at{};
      for (int o = 0; o < 8; ++o) {
        child_at[o] = static_cast<std::uint32_t>(nodes_.size());
        if (start[o] == start[o + 1]) continue;
        const vec3 child_centre{centre[0] + ((o & 4) ? quarter : -quarter),
                                centre[1] + ((o & 2) ? quarter : -quarter),
                                centre[2] + ((o & 1) ? quarter : -quarter)};
        const moments child =
            build(bodies, begin + start[o], begin + start[o + 1], child_centre, quarter, depth + 1);
        sum.mass += child.mass;
        for (int d = 0; d < 3; ++d) {
          sum.weighted[d] += child.weighted[d];
          sum.lo[d] = std::min(sum.lo[d], child.lo[d]);
          sum.hi[d] = std::max(sum.hi[d], child.hi[d]);
        }
      }
      finish(at, sum);
      // Bottom up, children in octant order: each child's moment moved to this centre of mass
      // (parallel axis), so the bits depend on this cell's particles alone.
      short_range_kernel::second_moment& q = nodes_[at].quad;
      const vec3 com = nodes_[at].com;
      for (int o = 0; o < 8; ++o) {
        if (start[o] == start[o + 1]) continue;
        const node& c = nodes_[child_at[o]];
        for (int k = 0; k < 6; ++k) q[k] += c.quad[k];
        add_outer(q, c.mass, c.com[0] - com[0], c.com[1] - com[1], c.com[2] - com[2]);
      }
    }
    node& n = nodes_[at];
    n.first = static_cast<std::uint32_t>(begin);
    n.count = static_cast<std::uint32_t>(end - begin);
    n.skip = static_cast<std::uint32_t>(nodes_.size());
    n.leaf = leaf;
    return sum;
  }

  // The centre of mass, mass and bounding box of node `at` from its summed moments.
  void finish(std::size_t at, const moments& sum) {
    node& n = nodes_[at];
    for (int d = 0; d < 3; ++d) {
      n.com[d] = sum.mass > 0 ? sum.weighted[d] / sum.mass : 0.5 * (sum.lo[d] + sum.hi[d]);
    }
    n.mass = sum.mass;
    n.quad = {0, 0, 0, 0, 0, 0};
    n.lo = sum.lo;
    n.hi = sum.hi;
    const double size =
        std::max({sum.hi[0] - sum.lo[0], sum.hi[1] - sum.lo[1], sum.hi[2] - sum.lo[2]});
    double offset2 = 0;
    for (int d = 0; d < 3; ++d) {
      const double o = n.com[d] - 0.5 * (sum.lo[d] + sum.hi[d]);
      offset2 += o * o;
    }
    const double reach = size / theta_ + std::sqrt(offset2);
    n.open2 = reach * reach;
  }

  static void add_outer(short_range_kernel::second_moment& q, double m, double x, double y,
                        double z) {
    q[0] += m * x * x;
    q[1] += m * x * y;
    q[2] += m * x * z;
    q[3] += m * y * y;
    q[4] += m * y * z;
    q[5] += m * z * z;
  }

  void walk(std::uint32_t begin, std::uint32_t end, const vec3& q, std::uint64_t self, double& ax,
            double& ay, double& az, double& phi) const {
    const double cutoff2 = kernel_.cutoff2;
    std::uint32_t i = begin;
    while (i < end) {
      const node& n = nodes_[i];
      // Nearest point of the node's box: if it is beyond r_cut, nothing inside can pull.
      double near2 = 0;
      bool inside = true;
      for (int d = 0; d < 3; ++d) {
        const double below = n.lo[d] - q[d], above = q[d] - n.hi[d];
        const double gap = below > 0 ? below : (above > 0 ? above : 0.0);
        if (gap > 0) inside = false;
        near2 += gap * gap;
      }
      if (near2 >= cutoff2) {
        i = n.skip;
        continue;
      }
      if (n.leaf) {
        for (std::uint32_t k = n.first; k < n.first + n.count; ++k) {
          if (id_[k] == self) continue;
          const double dx = q[0] - x_[k], dy = q[1] - y_[k], dz = q[2] - z_[k];
          kernel_.add(m_[k], dx, dy, dz, dx * dx + dy * dy + dz * dz, ax, ay, az, phi);
        }
        i = n.skip;
        continue;
      }
      const double dx = q[0] - n.com[0], dy = q[1] - n.com[1], dz = q[2] - n.com[2];
      const double r2 = dx * dx + dy * dy + dz * dz;
      // Barnes-Hut: size / (distance - offset) < theta, and never a node the target sits in.
      if (!inside && n.open2 < r2) {
        kernel_.add_node(n.mass, n.quad, dx, dy, dz, r2, ax, ay, az, phi);
        i = n.skip;
      } else {
        i = i + 1;  // first child
      }
    }
  }

  chain_grid grid_;
  short_range_kernel kernel_;
  double theta_;
  std::size_t leaf_size_;
  std::vector<std::uint32_t> cell_nodes_;  // nodes of chain cell c: [cell_nodes_[c], [c + 1])
  std::vector<node> nodes_;
  std::vector<body> scratch_;
  std::vector<double> x_, y_, z_, m_;  // the sources in tree order
  std::vector<std::uint64_t> id_;
};

}  // namespace nbody
