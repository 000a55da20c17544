// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::binomial`: logarithmic algorithms. Binomial trees for bcast, reduce, gather and
/// scatter (HPVM's replacement for PVM's sender-bound multicast loop, seed 001); recursive
/// doubling with the fold for non-powers of two for allreduce, allgather(v) and scan; a
/// dissemination barrier; pairwise exchange for alltoall. The "v" collectives whose counts only
/// the root knows (gatherv, scatterv) stay linear, as in MPICH; allgatherv doubles as allgather.
///
/// Reduction order: reduce and allreduce combine contiguous ranges of ranks, lower range on the
/// left, so any associative op (commutative or not) gives the rank-order result; the grouping
/// is fixed by the rank count, so the bits do not depend on the transport. reduce builds its
/// tree on rank 0 and, for another root, sends the result on: one more message, in exchange for
/// rank order.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/detail/by_halves.hpp"
#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/node_load.hpp"
#include "commx/coll/detail/pattern/binomial_tree.hpp"
#include "commx/coll/detail/pattern/recursive_doubling.hpp"
#include "commx/coll/detail/pattern/ring.hpp"
#include "commx/coll/detail/tree_sends.hpp"
#include "commx/coll/detail/two_waves.hpp"
#include "commx/coll/flat.hpp"
#include "commx/detail/shared_core.hpp"

namespace commx::coll {

/// Logarithmic collectives: binomial trees, recursive doubling and dissemination (see the file
/// comment).
struct binomial {
  /// The policy's name, as benches and examples print it.
  static constexpr std::string_view name = "binomial";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "binomial trees, recursive doubling, dissemination barrier, pairwise alltoall";

  /// Works over every transport.
  template <class Transport>
  static constexpr bool supports = true;

  /// The smallest allreduce that goes by halves: below it, the extra rounds' latency outweighs
  /// the folds and copies saved (PMB on shm: bench/HISTORY.md).
  static constexpr std::size_t by_halves_bytes = std::size_t{32} << 10;

  /// Bytes an allreduce may carry per rank of a core and still go in two waves.
  static constexpr std::size_t two_waves_bytes_per_turn = std::size_t{16} << 10;

  /// Whether an allreduce of `bytes` goes in two waves (detail/two_waves.hpp) rather than by
  /// halves, on a node whose cores run `ranks_per_core` of the job's ranks in turns: from
  /// commx::detail::queued_core ranks to a core and by_halves_bytes, up to 16 KiB per rank of a
  /// core. By halves waits for every rank's turn 2 L times, the waves twice, and the waves move
  /// 2 (L - 1) n more bytes and fold (L - 1) n more: they win while 2 k t > n (2 b + g), k
  /// ranks to a core taking turns of t (about 2.5 us on shm, 15 on tcp; cost_model.hpp) and
  /// b + g about 0.3 ns per byte, i.e. n below about k x 12.5 KiB on shm and more on tcp.
  [[nodiscard]] static constexpr bool in_two_waves(std::size_t bytes, int ranks_per_core) {
    return ranks_per_core >= commx::detail::queued_core && bytes >= by_halves_bytes &&
           bytes <= two_waves_bytes_per_turn * static_cast<std::size_t>(ranks_per_core);
  }

  /// A dissemination barrier: ceil(log2 p) rounds of one message.
  template <class Port>
  static void barrier(Port& p) {
    const std::span<const std::byte> signal;
    const std::span<std::byte> heard;
    for (int k = 0; k < detail::pattern::dissemination_rounds(p.size()); ++k) {
      auto sent = p.isend(detail::pattern::dissemination_to(p.rank(), k, p.size()), signal);
      p.recv(detail::pattern::dissemination_from(p.rank(), k, p.size()), heard);
      p.wait_all(std::span(&sent, 1));
    }
  }

  /// A binomial tree from the root, the largest subtree served first.
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    using namespace detail::pattern;
    const int v = relative_rank(p.rank(), root, p.size());
    if (v != 0) p.recv(absolute_rank(binomial_parent(v), root, p.size()), data);
    detail::tree_sends<Port> sends(p);
    const children kids = binomial_children(v, p.size());
    for (int i = kids.count - 1; i >= 0; --i) {  // the largest subtree first: it has most to do
      sends.send(absolute_rank(kids[i], root, p.size()), std::span<const E>(data));
    }
    sends.finish();
  }

  /// A reduce up recursive doubling's tree, then bcast from its root (detail/two_waves.hpp):
  /// what allreduce does where `in_two_waves` says, here whatever the load.
  template <class Port, class E, class Op>
  static void allreduce_in_two_waves(Port& p, std::span<E> data, Op op) {
    if (p.size() == 1) return;
    detail::reduce_up_doubling_tree(p, data, op);
    bcast(p, data, detail::wave_root(p.size()));
  }

  /// A binomial tree onto rank 0 that combines contiguous rank ranges (rank order); a root
  /// other than 0 gets the result in one more message.
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    using namespace detail::pattern;
    if (p.size() == 1) return;
    const int r = p.rank();
    const children kids = binomial_children(r, p.size());  // the tree is rooted at rank 0
    // Only rank 0 with root 0 may fold into the caller's data.
    const bool folds_aside = !(r == 0 && root == 0) && (kids.count > 0 || r == 0);
    const detail::scratch<E> aside(folds_aside ? data.size() : 0);
    std::span<E> acc = data;
    if (folds_aside) {
      std::ranges::copy(data, aside.view().begin());
      acc = aside.view();
    }
    const detail::scratch<E> room(kids.count > 0 ? data.size() : 0);
    const std::span<E> incoming = room.view();
    for (int child : kids) {
      p.recv(child, incoming);
      detail::combine_into(acc, std::span<const E>(incoming), op);
    }
    if (r != 0) p.send(binomial_parent(r), std::span<const E>(acc));
    if (root == 0) return;
    if (r == 0) p.send(root, std::span<const E>(acc));
    if (r == root) p.recv(0, data);
  }

  /// Recursive doubling, with the ranks beyond the largest power of two folded in first and
  /// served last; combines in rank order. From `by_halves_bytes` on, by halves
  /// (detail/by_halves.hpp): the same partners and the same bits, each rank folding and
  /// sending about one message's worth in all rather than one per round; or, where ranks take
  /// turns on crowded cores, in two waves up and down a tree (`in_two_waves`), the same bits
  /// again. Every rank of a node reads the same load (detail/node_load.hpp), so all choose alike.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    if (data.size_bytes() >= by_halves_bytes) {
      if (in_two_waves(data.size_bytes(), detail::ranks_per_core_for<Port>(p.size()))) {
        allreduce_in_two_waves(p, data, op);
      } else {
        detail::allreduce_by_halves(p, data, op);
      }
      return;
    }
    const detail::pattern::doubling plan(p.size());
    const int r = p.rank();
    if (p.size() == 1) return;
    const detail::scratch<E> room(data.size());
    const std::span<E> incoming = room.view();
    if (plan.sits_out(r)) {
      p.send(plan.fold_partner(r), std::span<const E>(data));
      p.recv(plan.fold_partner(r), data);
      return;
    }
    if (r < 2 * plan.extra) {  // the odd rank of a folded pair: x(r-1) op x(r)
      p.recv(plan.fold_partner(r), std::span<E>(incoming));
      detail::combine_from_left(std::span<const E>(incoming), data, op);
    }
    const int c = plan.core_rank(r);
    for (int k = 0; k < plan.rounds(); ++k) {
      const int partner_core = detail::pattern::doubling::partner(c, k);
      auto sent = p.isend(plan.rank_of_core(partner_core), std::span<const E>(data));
      p.recv(plan.rank_of_core(partner_core), std::span<E>(incoming));
      p.wait_all(std::span(&sent, 1));  // data is about to change under the send
      if (partner_core < c)
        detail::combine_from_left(std::span<const E>(incoming), data, op);
      else
        detail::combine_into(data, std::span<const E>(incoming), op);
    }
    if (r < 2 * plan.extra) p.send(plan.fold_partner(r), std::span<const E>(data));
  }

  /// A binomial tree: each rank forwards its subtree's blocks to its parent. The root receives
  /// each subtree straight into `out`, where its blocks belong.
  template <class Port, class E>
  static void gather(Port& p, std::span<const E> in, std::span<E> out, int root) {
    using namespace detail::pattern;
    const std::size_t n = in.size();
    const int v = relative_rank(p.rank(), root, p.size());
    const int span = subtree_size(v, p.size());
    const children kids = binomial_children(v, p.size());
    if (kids.count == 0 && v != 0) {
      p.send(absolute_rank(binomial_parent(v), root, p.size()), in);
      return;
    }
    if (v == 0) {
      std::ranges::copy(in, nth_block(out, root, n).begin());
      std::vector<E> wrapped;  // the blocks of the subtree that wraps past the last rank
      int wrapped_child = -1;
      detail::pending_list<Port> pending;
      for (int child : kids) {
        std::optional<std::span<E>> run = subtree_run(out, child, root, p.size(), n);
        if (!run) {
          wrapped.resize(static_cast<std::size_t>(subtree_size(child, p.size())) * n);
          wrapped_child = child;
          run = std::span<E>(wrapped);
        }
        pending.push_back(p.irecv(absolute_rank(child, root, p.size()), *run));
      }
      p.wait_all(pending.view());
      if (wrapped_child < 0) return;
      for (int k = 0; k < subtree_size(wrapped_child, p.size()); ++k) {
        std::ranges::copy(
            nth_block(std::span<const E>(wrapped), k, n),
            nth_block(out, absolute_rank(wrapped_child + k, root, p.size()), n).begin());
      }
      return;
    }
    // The subtree's blocks, in relative rank order: this rank's first.
    const detail::scratch<E> room(static_cast<std::size_t>(span) * n);
    const std::span<E> block = room.view();
    std::ranges::copy(in, block.begin());
    detail::pending_list<Port> pending;
    for (int child : kids) {
      const auto offset = static_cast<std::size_t>(child - v) * n;
      const auto count = static_cast<std::size_t>(subtree_size(child, p.size())) * n;
      pending.push_back(
          p.irecv(absolute_rank(child, root, p.size()), block.subspan(offset, count)));
    }
    p.wait_all(pending.view());
    p.send(absolute_rank(binomial_parent(v), root, p.size()), std::span<const E>(block));
  }

  /// A binomial tree: each rank receives its subtree's blocks and passes on its children's. The
  /// root sends each subtree straight out of `in`.
  template <class Port, class E>
  static void scatter(Port& p, std::span<const E> in, std::span<E> out, int root) {
    using namespace detail::pattern;
    const std::size_t n = out.size();
    const int v = relative_rank(p.rank(), root, p.size());
    const int span = subtree_size(v, p.size());
    const children kids = binomial_children(v, p.size());
    if (kids.count == 0 && v != 0) {
      p.recv(absolute_rank(binomial_parent(v), root, p.size()), out);
      return;
    }
    std::vector<E> block;  // the root's: the subtree that wraps; the others': their subtree's
    if (v != 0) {
      block.resize(static_cast<std::size_t>(span) * n);
      p.recv(absolute_rank(binomial_parent(v), root, p.size()), std::span<E>(block));
    }
    detail::tree_sends<Port> sends(p);
    for (int i = kids.count - 1; i >= 0; --i) {  // the largest subtree first
      const int child = kids[i];
      const int ranks = subtree_size(child, p.size());
      std::optional<std::span<const E>> run;
      if (v != 0) {
        run = std::span<const E>(block).subspan(static_cast<std::size_t>(child - v) * n,
                                                static_cast<std::size_t>(ranks) * n);
      } else {
        run = subtree_run(in, child, root, p.size(), n);
      }
      if (!run) {
        block.resize(static_cast<std::size_t>(ranks) * n);
        for (int k = 0; k < ranks; ++k) {
          std::ranges::copy(nth_block(in, absolute_rank(child + k, root, p.size()), n),
                            nth_block(std::span<E>(block), k, n).begin());
        }
        run = std::span<const E>(block);
      }
      sends.send(absolute_rank(child, root, p.size()), *run);
    }
    if (v == 0) {
      std::ranges::copy(nth_block(in, root, n), out.begin());
    } else {
      std::copy_n(block.begin(), n, out.begin());
    }
    sends.finish();
  }

  /// Recursive doubling on the whole output (doubling_allgather): L a + (p-1) n b, and for
  /// the fold beyond a power of two 2 (a + p n b).
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    const std::size_t n = in.size();
    doubling_allgather(p, in, out, [n](int r) { return static_cast<std::size_t>(r) * n; });
  }

  /// Pairwise exchange: in step s, send to rank + s and receive from rank - s.
  template <class Port, class E>
  static void alltoall(Port& p, std::span<const E> in, std::span<E> out) {
    const std::size_t n = in.size() / static_cast<std::size_t>(p.size());
    const auto block = [n](auto buffer, int r) {
      return buffer.subspan(static_cast<std::size_t>(r) * n, n);
    };
    std::ranges::copy(block(in, p.rank()), block(out, p.rank()).begin());
    for (int s = 1; s < p.size(); ++s) {
      const int to = detail::pattern::exchange_to(p.rank(), s, p.size());
      const int from = detail::pattern::exchange_from(p.rank(), s, p.size());
      auto sent = p.isend(to, block(in, to));
      p.recv(from, block(out, from));
      p.wait_all(std::span(&sent, 1));
    }
  }

  /// Hillis-Steele: in the round at distance d, rank r folds in the window that ends at r - d.
  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    const detail::scratch<E> room(data.size());
    const std::span<E> incoming = room.view();
    for (int d = 1; d < p.size(); d <<= 1) {
      typename Port::pending sent;
      if (p.rank() + d < p.size()) sent = p.isend(p.rank() + d, std::span<const E>(data));
      if (p.rank() - d >= 0) p.recv(p.rank() - d, std::span<E>(incoming));
      p.wait_all(std::span(&sent, 1));
      if (p.rank() - d >= 0) detail::combine_from_left(std::span<const E>(incoming), data, op);
    }
  }

  /// Hillis-Steele at distances 1, 2, 4, ...: rank r folds in the window that ends at r - d;
  /// rank 0's `data` is unchanged.
  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    std::vector<E> window(data.begin(), data.end());  // inclusive, as in scan
    const detail::scratch<E> room(data.size());
    const std::span<E> incoming = room.view();
    bool have_prefix = false;
    for (int d = 1; d < p.size(); d <<= 1) {
      typename Port::pending sent;
      if (p.rank() + d < p.size()) sent = p.isend(p.rank() + d, std::span<const E>(window));
      if (p.rank() - d >= 0) p.recv(p.rank() - d, std::span<E>(incoming));
      p.wait_all(std::span(&sent, 1));
      if (p.rank() - d < 0) continue;
      if (have_prefix)
        detail::combine_from_left(std::span<const E>(incoming), data, op);
      else
        std::ranges::copy(incoming, data.begin());
      have_prefix = true;
      detail::combine_from_left(std::span<const E>(incoming), std::span<E>(window), op);
    }
  }

  /// Linear, as in MPICH: only the root knows the counts (flat::gatherv).
  template <class Port, class E>
  static void gatherv(Port& p, std::span<const E> in, std::span<E> out,
                      std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                      int root) {
    flat::gatherv(p, in, out, counts, displs, root);
  }

  /// Linear, as in MPICH: only the root knows the counts (flat::scatterv).
  template <class Port, class E>
  static void scatterv(Port& p, std::span<const E> in, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::span<E> out, int root) {
    flat::scatterv(p, in, counts, displs, out, root);
  }

  /// Recursive doubling, as allgather: L a + (t - c) b for t elements in all and c of this
  /// rank's, and for the fold 2 (a + t b); a rank talks to L peers (+1), where a direct
  /// exchange (flat's) talks to p-1 and takes p-1 latencies. Blocks that lie in rank order
  /// without gaps are exchanged where they are; others are exchanged packed in a scratch of t
  /// elements, then copied to their places.
  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    const auto ranks = static_cast<std::size_t>(p.size());
    bool in_rank_order = true;
    for (std::size_t r = 1; r < ranks; ++r)
      in_rank_order = in_rank_order && displs[r] == displs[r - 1] + counts[r - 1];
    if (in_rank_order) {
      const std::size_t end = displs[ranks - 1] + counts[ranks - 1];
      doubling_allgather(p, in, out, [&](int r) {
        return static_cast<std::size_t>(r) < ranks ? displs[static_cast<std::size_t>(r)] : end;
      });
      return;
    }
    std::vector<std::size_t> packed_at(ranks + 1, 0);
    for (std::size_t r = 0; r < ranks; ++r) packed_at[r + 1] = packed_at[r] + counts[r];
    const detail::scratch<E> packed(packed_at.back());
    doubling_allgather(p, in, packed.view(),
                       [&](int r) { return packed_at[static_cast<std::size_t>(r)]; });
    const auto me = static_cast<std::size_t>(p.rank());
    for (std::size_t r = 0; r < ranks; ++r) {
      if (r == me) continue;
      std::copy_n(packed.view().begin() + static_cast<std::ptrdiff_t>(packed_at[r]), counts[r],
                  out.begin() + static_cast<std::ptrdiff_t>(displs[r]));
    }
    detail::place_own_block(in, out, displs[me]);
  }

  /// Pairwise exchange: in step s, send to rank + s and receive from rank - s.
  template <class Port, class E>
  static void alltoallv(Port& p, std::span<const E> in, std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, std::span<E> out,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs) {
    const auto index = [](int r) { return static_cast<std::size_t>(r); };
    const int me = p.rank();
    std::ranges::copy(in.subspan(send_displs[index(me)], send_counts[index(me)]),
                      out.begin() + static_cast<std::ptrdiff_t>(recv_displs[index(me)]));
    for (int s = 1; s < p.size(); ++s) {
      const int to = detail::pattern::exchange_to(me, s, p.size());
      const int from = detail::pattern::exchange_from(me, s, p.size());
      auto sent = p.isend(to, in.subspan(send_displs[index(to)], send_counts[index(to)]));
      p.recv(from, out.subspan(recv_displs[index(from)], recv_counts[index(from)]));
      p.wait_all(std::span(&sent, 1));
    }
  }

  /// reduce onto rank 0, which sends each rank its block.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    detail::reduce_scatter_through_zero<binomial>(p, data, counts, op);
  }

 private:
  // Block k of a buffer made of blocks of n elements.
  template <class E>
  static std::span<E> nth_block(std::span<E> buffer, int k, std::size_t n) {
    return buffer.subspan(static_cast<std::size_t>(k) * n, n);
  }

  // Where the blocks of the subtree under relative rank `child` lie in a buffer of every rank's
  // block in rank order (the root's): one run, in the subtree's relative order, unless the
  // subtree wraps past the last rank. At most one subtree of the root's does: the subtrees
  // split the relative ranks 1..p-1 into consecutive ranges.
  template <class E>
  static std::optional<std::span<E>> subtree_run(std::span<E> buffer, int child, int root, int size,
                                                 std::size_t n) {
    const int first = detail::pattern::absolute_rank(child, root, size);
    const int ranks = detail::pattern::subtree_size(child, size);
    if (first + ranks > size) return std::nullopt;
    return buffer.subspan(static_cast<std::size_t>(first) * n, static_cast<std::size_t>(ranks) * n);
  }

  // Recursive doubling on blocks in rank order without gaps: rank r's is out[start(r),
  // start(r + 1)). In round k each core rank swaps the 2^k blocks it holds with its partner's,
  // which lie next to them; a folded pair's even rank hands its block over first and is handed
  // everything last.
  template <class Port, class E, class Start>
  static void doubling_allgather(Port& p, std::span<const E> in, std::span<E> out, Start start) {
    const int r = p.rank();
    const auto range = [&](int first, int last) {  // the blocks of ranks [first, last)
      return out.subspan(start(first), start(last) - start(first));
    };
    const std::span<E> own = range(r, r + 1);
    if (p.size() == 1) {
      detail::place_own_block(in, out, start(r));
      return;
    }
    const detail::pattern::doubling plan(p.size());
    auto blocks = [&](int first_core, int cores) {
      return range(plan.first_of(first_core), plan.first_of(first_core + cores));
    };
    if (plan.sits_out(r)) {
      p.send(plan.fold_partner(r), in);
      p.recv(plan.fold_partner(r), range(0, p.size()));
      return;
    }
    if (r < 2 * plan.extra) p.recv(plan.fold_partner(r), range(r - 1, r));
    // A first block that is our own alone goes out from `in`, and is put in place while it
    // travels: a peer that reads it straight from our memory (shm's cma) reads lines nobody
    // just wrote, and does not wait for our copy.
    const int c = plan.core_rank(r);
    const std::span<E> first_block = blocks(c, 1);
    const bool send_in = first_block.data() == own.data() && first_block.size() == own.size();
    if (!send_in) detail::place_own_block(in, out, start(r));
    for (int k = 0; k < plan.rounds(); ++k) {
      const int width = 1 << k;
      const int partner_core = detail::pattern::doubling::partner(c, k);
      auto sent =
          p.isend(plan.rank_of_core(partner_core),
                  k == 0 && send_in ? in : std::span<const E>(blocks(c & ~(width - 1), width)));
      if (k == 0 && send_in) detail::place_own_block(in, out, start(r));
      p.recv(plan.rank_of_core(partner_core), blocks(partner_core & ~(width - 1), width));
      p.wait_all(std::span(&sent, 1));
    }
    if (r < 2 * plan.extra) p.send(plan.fold_partner(r), std::span<const E>(range(0, p.size())));
  }
};

}  // namespace commx::coll
