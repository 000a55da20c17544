// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// An allreduce's first wave, of two: a reduce up a binomial tree over recursive doubling's core
/// ranks (pattern/recursive_doubling.hpp: the ranks beyond the largest power of two fold in
/// first) onto `wave_root`; the second is binomial's bcast from there (binomial.hpp). Core rank c's children
/// are c + 1, c + 2, c + 4, ... and it folds them in that order, lower range on the left: the
/// grouping recursive doubling and by halves make, so the bits are `binomial::allreduce`'s.
///
/// Cost: 2 ceil(log2 p) (a + n b) + log2 q n g on the critical path, against by halves'
/// 2 log2 q a + 2 n b + n g: worse where each rank has a core. It is for ranks that take turns
/// on crowded cores (binomial::in_two_waves says when): a message then waits until its
/// receiver's turn comes, and each of by halves' 2 log2 q rounds needs every rank to run once
/// more, where a wave runs each rank once on the way up and once on the way down. Open MPI's
/// tuned decision takes a reduce and a bcast ("nonoverlapping") at 128 to 255 ranks up to
/// 128 KiB. Measured on 2 cores, 64 KiB (bench/HISTORY.md, 2026-11-29): 16 / 32 / 64 / 128 / 256
/// ranks 230 / 597 / 1604 / 3064 / 10117 us in two waves, 280 / 846 / 2229 / 5740 / 17019 by
/// halves (shm, both reading large messages by cma); on tcp at 128 ranks 6.1-6.5 ms against
/// 19.0 by halves and 6.7-6.8 flat.

#include <span>

#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/pattern/binomial_tree.hpp"
#include "commx/coll/detail/pattern/recursive_doubling.hpp"

namespace commx::coll::detail {

/// The rank the first wave ends at: core rank 0.
[[nodiscard]] constexpr int wave_root(int ranks) {
  return pattern::doubling(ranks).rank_of_core(0);
}

/// The first wave: `data` at wave_root(p.size()) becomes the reduction of all ranks' `data`
/// (see the file comment); elsewhere it holds partial results.
template <class Port, class E, class Op>
void reduce_up_doubling_tree(Port& p, std::span<E> data, Op& op) {
  using namespace pattern;
  const doubling plan(p.size());
  const int r = p.rank();
  if (plan.sits_out(r)) {
    p.send(plan.fold_partner(r), std::span<const E>(data));
    return;
  }
  const int c = plan.core_rank(r);
  const children kids = binomial_children(c, plan.core);
  const bool folds_pair = r < 2 * plan.extra;  // the odd rank of a folded pair
  const scratch<E> room(folds_pair || kids.count > 0 ? data.size() : 0);
  const std::span<E> incoming = room.view();
  if (folds_pair) {  // x(r-1) op x(r)
    p.recv(plan.fold_partner(r), incoming);
    combine_from_left(std::span<const E>(incoming), data, op);
  }
  for (int child : kids) {
    p.recv(plan.rank_of_core(child), incoming);
    combine_into(data, std::span<const E>(incoming), op);
  }
  if (c != 0) p.send(plan.rank_of_core(binomial_parent(c)), std::span<const E>(data));
}

}  // namespace commx::coll::detail
