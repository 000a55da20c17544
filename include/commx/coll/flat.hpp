// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::flat`: the root talks to every other rank directly. O(p) messages at the root for
/// every rooted collective; the baseline the papers' trees beat (PVM's sender-bound multicast
/// loop in seed 001), kept because it is simple, obviously correct, and the fastest choice on
/// two or three ranks.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/tree_sends.hpp"

namespace commx::coll {

/// Root-linear collectives: every rooted collective is p-1 messages to or from the root.
struct flat {
  /// The policy's name, as benches and examples print it.
  static constexpr std::string_view name = "flat";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "root-linear: the root sends to or receives from each rank in turn";

  /// Works over every transport.
  template <class Transport>
  static constexpr bool supports = true;

  /// Fan-in to rank 0, then fan-out from it.
  template <class Port>
  static void barrier(Port& p) {
    const std::span<const std::byte> nothing;
    const std::span<std::byte> none;
    if (p.rank() == 0) {
      for (int r = 1; r < p.size(); ++r) p.recv(r, none);
      for (int r = 1; r < p.size(); ++r) p.send(r, nothing);
    } else {
      p.send(0, nothing);
      p.recv(0, none);
    }
  }

  /// The root sends `data` to each rank: to the ranks of its own node all at once, so that
  /// they copy a large message out together as Open MPI's linear bcast lets them (shm's cma:
  /// one send after another took 1.2-1.4x its time at 4 ranks from 256 KiB, bench/HISTORY.md),
  /// to other nodes one after another (detail/tree_sends.hpp).
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    if (p.rank() != root) {
      p.recv(root, data);
      return;
    }
    detail::tree_sends<Port> sends(p);
    for (int r = 0; r < p.size(); ++r) {
      if (r != root) sends.send(r, std::span<const E>(data));
    }
    sends.finish();
  }

  /// Folds in rank order, so the result is the same bits whatever the root and transport.
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    if (p.rank() != root) {
      p.send(root, std::span<const E>(data));
      return;
    }
    if (p.size() == 1) return;
    const detail::scratch<E> room(data.size());
    const std::span<E> incoming = room.view();
    if (root == 0) {
      for (int r = 1; r < p.size(); ++r) {
        p.recv(r, std::span<E>(incoming));
        detail::combine_into(data, std::span<const E>(incoming), op);
      }
      return;
    }
    const detail::scratch<E> acc_room(data.size());
    const std::span<E> acc = acc_room.view();
    p.recv(0, acc);
    for (int r = 1; r < p.size(); ++r) {
      if (r == root) {
        detail::combine_into(acc, std::span<const E>(data), op);
      } else {
        p.recv(r, std::span<E>(incoming));
        detail::combine_into(acc, std::span<const E>(incoming), op);
      }
    }
    std::ranges::copy(acc, data.begin());
  }

  /// reduce to rank 0, then bcast from it.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    reduce(p, data, op, 0);
    bcast(p, data, 0);
  }

  /// gatherv with equal blocks.
  template <class Port, class E>
  static void gather(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const blocks layout = equal_blocks(p.size(), in.size());
    gatherv(p, in, out, layout.counts, layout.displs, root);
  }

  /// scatterv with equal blocks.
  template <class Port, class E>
  static void scatter(Port& p, std::span<const E> in, std::span<E> out, int root) {
    const blocks layout = equal_blocks(p.size(), out.size());
    scatterv(p, in, layout.counts, layout.displs, out, root);
  }

  /// gather to rank 0, then bcast from it.
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    gather(p, in, out, 0);
    bcast(p, out, 0);
  }

  /// Every rank posts all its receives, then all its sends: no ordering can deadlock.
  template <class Port, class E>
  static void alltoall(Port& p, std::span<const E> in, std::span<E> out) {
    const std::size_t n = in.size() / static_cast<std::size_t>(p.size());
    detail::pending_list<Port> pending;
    pending.reserve(2 * static_cast<std::size_t>(p.size()));
    for (int r = 0; r < p.size(); ++r) {
      if (r != p.rank())
        pending.push_back(p.irecv(r, out.subspan(static_cast<std::size_t>(r) * n, n)));
    }
    for (int r = 0; r < p.size(); ++r) {
      const auto slot = in.subspan(static_cast<std::size_t>(r) * n, n);
      if (r == p.rank())
        std::ranges::copy(slot, out.begin() + static_cast<std::ptrdiff_t>(r * n));
      else
        pending.push_back(p.isend(r, slot));
    }
    p.wait_all(pending.view());
  }

  /// A chain: rank r takes the prefix from r-1, folds its own data on the right, passes it on.
  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    if (p.rank() > 0) {
      std::vector<E> prefix(data.size());
      p.recv(p.rank() - 1, std::span<E>(prefix));
      detail::combine_from_left(std::span<const E>(prefix), data, op);
    }
    if (p.rank() + 1 < p.size()) p.send(p.rank() + 1, std::span<const E>(data));
  }

  /// A chain: rank r receives the prefix of ranks 0..r-1 from r-1 and passes on that prefix
  /// with its own data folded in.
  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    if (p.rank() == 0) {
      if (p.size() > 1) p.send(1, std::span<const E>(data));
      return;
    }
    std::vector<E> prefix(data.size());
    p.recv(p.rank() - 1, std::span<E>(prefix));
    if (p.rank() + 1 < p.size()) {
      detail::combine_from_left(std::span<const E>(prefix), data, op);  // what the next rank needs
      p.send(p.rank() + 1, std::span<const E>(data));
    }
    std::ranges::copy(prefix, data.begin());
  }

  /// Every rank sends its block to the root, which receives them in rank order.
  template <class Port, class E>
  static void gatherv(Port& p, std::span<const E> in, std::span<E> out,
                      std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                      int root) {
    if (p.rank() != root) {
      p.send(root, in);
      return;
    }
    detail::pending_list<Port> pending;
    for (int r = 0; r < p.size(); ++r) {
      auto slot = out.subspan(displs[index(r)], counts[index(r)]);
      if (r == root)
        std::ranges::copy(in, slot.begin());
      else
        pending.push_back(p.irecv(r, slot));
    }
    p.wait_all(pending.view());
  }

  /// The root sends each rank its block.
  template <class Port, class E>
  static void scatterv(Port& p, std::span<const E> in, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::span<E> out, int root) {
    if (p.rank() != root) {
      p.recv(root, out);
      return;
    }
    detail::pending_list<Port> pending;
    for (int r = 0; r < p.size(); ++r) {
      auto slot = in.subspan(displs[index(r)], counts[index(r)]);
      if (r == root)
        std::ranges::copy(slot, out.begin());
      else
        pending.push_back(p.isend(r, slot));
    }
    p.wait_all(pending.view());
  }

  /// Every rank sends its block to every other rank directly.
  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    detail::pending_list<Port> pending;
    for (int r = 0; r < p.size(); ++r) {
      if (r != p.rank())
        pending.push_back(p.irecv(r, out.subspan(displs[index(r)], counts[index(r)])));
    }
    for (int r = 0; r < p.size(); ++r) {
      if (r != p.rank()) pending.push_back(p.isend(r, in));
    }
    detail::place_own_block(in, out, displs[index(p.rank())]);  // while they travel
    p.wait_all(pending.view());
  }

  /// Every rank posts all its receives and sends at once.
  template <class Port, class E>
  static void alltoallv(Port& p, std::span<const E> in, std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, std::span<E> out,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs) {
    detail::pending_list<Port> pending;
    for (int r = 0; r < p.size(); ++r) {
      if (r != p.rank()) {
        pending.push_back(p.irecv(r, out.subspan(recv_displs[index(r)], recv_counts[index(r)])));
      }
    }
    for (int r = 0; r < p.size(); ++r) {
      const auto block = in.subspan(send_displs[index(r)], send_counts[index(r)]);
      if (r == p.rank()) {
        std::ranges::copy(block, out.begin() + static_cast<std::ptrdiff_t>(recv_displs[index(r)]));
      } else {
        pending.push_back(p.isend(r, block));
      }
    }
    p.wait_all(pending.view());
  }

  /// Reduce everything to rank 0 (rank-order fold), then hand each rank its block.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    detail::reduce_scatter_through_zero<flat>(p, data, counts, op);
  }

 private:
  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  struct blocks {
    std::vector<std::size_t> counts;
    std::vector<std::size_t> displs;
  };
  // p blocks of n elements, back to back: gather and scatter are their "v" forms with these.
  static blocks equal_blocks(int p, std::size_t n) {
    blocks layout{std::vector<std::size_t>(index(p), n), std::vector<std::size_t>(index(p))};
    for (std::size_t r = 0; r < layout.displs.size(); ++r) layout.displs[r] = r * n;
    return layout;
  }
};

}  // namespace commx::coll