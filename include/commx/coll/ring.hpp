// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::ring`: bandwidth-optimal rings for large data. allreduce is a ring reduce-scatter
/// followed by a ring allgather (2(p-1) steps of n/p elements each, so every rank sends about
/// 2n elements whatever p); allgather, allgatherv and reduce_scatter are rings too; a large
/// bcast is a binomial scatter followed by a ring allgather (van de Geijn's, as MPICH's for long
/// messages; by recursive doubling on a power of two, as MPICH's for medium ones). Everything
/// else is `binomial`'s.
///
/// Reduction order: a ring folds each segment in ring order starting after its owner, which is
/// only right for commutative ops (`commx::commutative<Op, E>`); for other ops allreduce and
/// reduce_scatter take binomial's rank-order path. Either way the order is fixed by the rank
/// count, so the bits do not depend on the transport.

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/concept.hpp"
#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/cost_model.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/pattern/binomial_tree.hpp"
#include "commx/coll/detail/pattern/ring.hpp"
#include "commx/coll/detail/tree_sends.hpp"
#include "commx/ops.hpp"

namespace commx::coll {

/// binomial, with rings for allreduce, allgather, allgatherv, reduce_scatter and large bcast.
struct ring : binomial {
  /// The policy's name, as benches and examples print it.
  static constexpr std::string_view name = "ring";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "ring reduce-scatter + allgather for allreduce; ring allgather(v) and reduce_scatter";

  /// A ring reduce-scatter, then a ring allgather (2(p-1) steps of n/p elements); binomial's
  /// rank-order allreduce for ops that are not commutative and for fewer elements than ranks.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    if constexpr (!commutative<Op, E>) {
      binomial::allreduce(p, data, op);
    } else {
      if (p.size() == 1) return;
      // Fewer elements than ranks: the ring's 2 (p-1) steps would carry mostly empty segments.
      if (data.size() < index(p.size())) return binomial::allreduce(p, data, op);
      const segments parts = even_segments(data.size(), p.size());
      reduce_scatter_segments(p, data, parts, op);
      allgather_segments(p, data, parts);
    }
  }

  /// From detail::scatter_allgather_bcast_bytes on 4 ranks or more: the root's data cut into
  /// p segments, scattered down a binomial tree (each rank receives its subtree's segments,
  /// contiguous, in one message: L a + (p-1)/p n b), then a ring allgather ((p-1)(a + n/p b)):
  /// about 2 n b in all, where binomial's tree sends n to each of L levels (L (a + n b)). Where
  /// detail::scatter_doubling_bcast says (a power of two from 8 ranks: MPICH's medium
  /// broadcast), the allgather goes by recursive doubling instead (L a + (p-1)/p n b): the
  /// ring's p-1 latencies outweigh its segments. Below, or with fewer elements than ranks,
  /// binomial's tree.
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    const int size = p.size();
    if (data.size_bytes() < detail::scatter_allgather_bcast_bytes || size < 4 ||
        data.size() < index(size)) {
      return binomial::bcast(p, data, root);
    }
    using namespace detail::pattern;
    // Relative rank v owns even segment v: a subtree's segments are contiguous in `data`.
    const segments even = even_segments(data.size(), size);
    const auto range = [&](int first, int count) {
      const segment& a = even[index(first)];
      const segment& b = even[index(first + count - 1)];
      return data.subspan(a.offset, b.offset + b.count - a.offset);
    };
    const int v = relative_rank(p.rank(), root, size);
    if (v != 0) {
      p.recv(absolute_rank(binomial_parent(v), root, size), range(v, subtree_size(v, size)));
    }
    detail::tree_sends<Port> sends(p);
    const children kids = binomial_children(v, size);
    for (int i = kids.count - 1; i >= 0; --i) {
      sends.send(absolute_rank(kids[i], root, size),
                 std::span<const E>(range(kids[i], subtree_size(kids[i], size))));
    }
    sends.finish();  // the allgather writes into what these sends read
    if (detail::scatter_doubling_bcast(size)) {
      // Relative ranks as cores: in round k, v and v ^ 2^k swap the 2^k segments they hold.
      for (int k = 0; (1 << k) < size; ++k) {
        const int width = 1 << k;
        const int partner = v ^ width;
        auto sent = p.isend(absolute_rank(partner, root, size),
                            std::span<const E>(range(v & ~(width - 1), width)));
        p.recv(absolute_rank(partner, root, size), range(partner & ~(width - 1), width));
        p.wait_all(std::span(&sent, 1));
      }
      return;
    }
    segments mine(index(size));
    for (int r = 0; r < size; ++r) mine[index(r)] = even[index(relative_rank(r, root, size))];
    allgather_segments(p, data, mine);
  }

  /// A ring: in p-1 steps each rank passes on the block it received last.
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    const std::size_t n = in.size();
    segments parts;
    for (int r = 0; r < p.size(); ++r) parts.push_back({index(r) * n, n});
    allgather_segments(p, out, parts, in, true);
  }

  /// A ring, as allgather, with blocks of `counts` elements.
  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    segments parts;
    for (int r = 0; r < p.size(); ++r) parts.push_back({displs[index(r)], counts[index(r)]});
    allgather_segments(p, out, parts, in, true);
  }

  /// A ring reduce-scatter over `counts`; binomial's for ops that are not commutative.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    if constexpr (!commutative<Op, E>) {
      binomial::reduce_scatter(p, data, counts, op);
    } else {
      segments parts;
      std::size_t offset = 0;
      for (int r = 0; r < p.size(); ++r) {
        parts.push_back({offset, counts[index(r)]});
        offset += counts[index(r)];
      }
      reduce_scatter_segments(p, data, parts, op);
      const auto mine = parts[index(p.rank())];
      std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(mine.offset), mine.count,
                  data.begin());
    }
  }

 private:
  struct segment {
    std::size_t offset;
    std::size_t count;
  };
  using segments = std::vector<segment>;

  static std::size_t index(int r) { return static_cast<std::size_t>(r); }
  static int wrap(int r, int size) { return ((r % size) + size) % size; }

  static segments even_segments(std::size_t n, int size) {
    segments parts;
    for (int i = 0; i < size; ++i) {
      const auto begin =
          static_cast<std::size_t>(detail::pattern::segment_begin(static_cast<long>(n), size, i));
      const auto end =
          static_cast<std::size_t>(detail::pattern::segment_end(static_cast<long>(n), size, i));
      parts.push_back({begin, end - begin});
    }
    return parts;
  }

  template <class E>
  static std::span<E> part(std::span<E> data, const segment& s) {
    return data.subspan(s.offset, s.count);
  }

  /// After p-1 steps rank r holds the full reduction of segment r. In step k it passes on
  /// segment r-k-1 and folds the incoming segment r-k-2 into its own contribution.
  template <class Port, class E, class Op>
  static void reduce_scatter_segments(Port& p, std::span<E> data, const segments& parts, Op& op) {
    const int r = p.rank();
    const int right = detail::pattern::ring_right(r, p.size());
    const int left = detail::pattern::ring_left(r, p.size());
    std::size_t largest = 0;
    for (const segment& s : parts) largest = std::max(largest, s.count);
    const detail::scratch<E> room(largest);
    for (int k = 0; k + 1 < p.size(); ++k) {
      const segment& out = parts[index(wrap(r - k - 1, p.size()))];
      const segment& in = parts[index(wrap(r - k - 2, p.size()))];
      auto sent = p.isend(right, std::span<const E>(part(data, out)));
      const std::span<E> arriving = room.view().first(in.count);
      p.recv(left, arriving);
      p.wait_all(std::span(&sent, 1));
      detail::combine_into(part(data, in), std::span<const E>(arriving), op);
    }
  }

  /// Rank r starts with segment r complete, or with it in `own` (`own_apart`: then its first
  /// step sends `own` and puts it in place while it travels: a peer that reads it straight
  /// from our memory, shm's cma, reads lines nobody just wrote and does not wait for our
  /// copy); in step k it passes on segment r-k and takes segment r-k-1 from the left.
  template <class Port, class E>
  static void allgather_segments(Port& p, std::span<E> data, const segments& parts,
                                 std::span<const E> own = {}, bool own_apart = false) {
    const int r = p.rank();
    const int right = detail::pattern::ring_right(r, p.size());
    const int left = detail::pattern::ring_left(r, p.size());
    const auto place_own = [&] {
      if (own_apart) detail::place_own_block(own, data, parts[index(r)].offset);
      own_apart = false;
    };
    for (int k = 0; k + 1 < p.size(); ++k) {
      auto sent = p.isend(
          right,
          own_apart ? own : std::span<const E>(part(data, parts[index(wrap(r - k, p.size()))])));
      place_own();
      p.recv(left, part(data, parts[index(wrap(r - k - 1, p.size()))]));
      p.wait_all(std::span(&sent, 1));
    }
    place_own();
  }
};

}  // namespace commx::coll
