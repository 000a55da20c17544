// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// An allreduce by halves (Rabenseifner's): a reduce-scatter by recursive halving, then an
/// allgather by recursive doubling. Each rank folds and sends about n elements in all, where
/// recursive doubling on the whole message folds and sends n per round (log2 p rounds).
///
/// The partners are recursive doubling's (pattern/recursive_doubling.hpp), nearest first, and
/// the ranks beyond the largest power of two fold in first and are served last, as there: every
/// element is combined in the same grouping, contiguous ranges of ranks with the lower on the
/// left, so any associative op gives the rank-order result and the bits are those of
/// `binomial::allreduce`. Nearest first also means that where ranks sit in blocks of 2^j per
/// node, the first j rounds stay within each node and only the last ones cross between nodes,
/// every rank of a node carrying its share of the crossing.

#include <cstddef>
#include <span>
#include <utility>

#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/pattern/recursive_doubling.hpp"

namespace commx::coll::detail {

/// Every rank's `data` becomes the reduction of all ranks' `data` (see the file comment).
template <class Port, class E, class Op>
void allreduce_by_halves(Port& p, std::span<E> data, Op& op) {
  const pattern::doubling plan(p.size());
  const int r = p.rank();
  if (p.size() == 1) return;
  if (plan.sits_out(r)) {
    p.send(plan.fold_partner(r), std::span<const E>(data));
    p.recv(plan.fold_partner(r), data);
    return;
  }
  const bool folds_pair = r < 2 * plan.extra;  // the odd rank of a folded pair
  const scratch<E> room(folds_pair ? data.size() : data.size() - data.size() / 2);
  const std::span<E> incoming = room.view();
  if (folds_pair) {  // x(r-1) op x(r)
    p.recv(plan.fold_partner(r), incoming);
    combine_from_left(std::span<const E>(incoming), data, op);
  }
  const int c = plan.core_rank(r);
  // The range [lo, hi) this rank holds before halving round k: rounds 0..k-1 replayed. In each
  // round the lower core rank of a pair keeps the lower half. A rank and its round-k partner
  // hold the same range before round k.
  const auto held_before = [&](int k) {
    std::size_t lo = 0;
    std::size_t hi = data.size();
    for (int j = 0; j < k; ++j) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (c < pattern::doubling::partner(c, j) ? hi : lo) = mid;
    }
    return std::pair{lo, hi};
  };
  // Halving: keep one half of the range, hand the other to the partner, fold in its copy of
  // the half kept.
  for (int k = 0; k < plan.rounds(); ++k) {
    const int partner_core = pattern::doubling::partner(c, k);
    const bool lower = c < partner_core;
    const auto [lo, hi] = held_before(k);
    const std::size_t mid = lo + (hi - lo) / 2;
    const std::span<E> keep = lower ? data.subspan(lo, mid - lo) : data.subspan(mid, hi - mid);
    const std::span<const E> give = lower ? std::span<const E>(data).subspan(mid, hi - mid)
                                          : std::span<const E>(data).subspan(lo, mid - lo);
    const std::span<E> theirs = incoming.first(keep.size());
    auto sent = p.isend(plan.rank_of_core(partner_core), give);
    p.recv(plan.rank_of_core(partner_core), theirs);
    if (lower) {
      combine_into(keep, std::span<const E>(theirs), op);
    } else {
      combine_from_left(std::span<const E>(theirs), keep, op);
    }
    p.wait_all(std::span(&sent, 1));
  }
  // Doubling: the halves back, the last round's first.
  for (int k = plan.rounds() - 1; k >= 0; --k) {
    const int partner_core = pattern::doubling::partner(c, k);
    const auto [lo, hi] = held_before(k);
    const std::size_t mid = lo + (hi - lo) / 2;
    const bool lower = c < partner_core;
    const std::span<const E> mine = lower ? std::span<const E>(data).subspan(lo, mid - lo)
                                          : std::span<const E>(data).subspan(mid, hi - mid);
    const std::span<E> theirs = lower ? data.subspan(mid, hi - mid) : data.subspan(lo, mid - lo);
    auto sent = p.isend(plan.rank_of_core(partner_core), mine);
    p.recv(plan.rank_of_core(partner_core), theirs);
    p.wait_all(std::span(&sent, 1));
  }
  if (folds_pair) p.send(plan.fold_partner(r), std::span<const E>(data));
}

}  // namespace commx::coll::detail
