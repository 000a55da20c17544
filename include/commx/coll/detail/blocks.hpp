// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Blocks of a collective's buffers: a rank's own block put in place, and reduce_scatter built
/// on a policy's reduce (reduce to rank 0, which hands rank r its block; the block lands at the
/// front of r's buffer).

#include <algorithm>
#include <cstddef>
#include <span>

#include "commx/coll/detail/inline_list.hpp"

namespace commx::coll::detail {

/// Copies a rank's own block `in` to `out[offset, +in.size())`, unless it is there already: an
/// allgatherv may be handed its own block of `out` as `in` (hierarchical's leaders are).
template <class E>
void place_own_block(std::span<const E> in, std::span<E> out, std::size_t offset) {
  E* const target = out.data() + offset;
  if (in.data() != target) std::ranges::copy(in, target);
}

template <class Policy, class Port, class E, class Op>
void reduce_scatter_through_zero(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                                 Op& op) {
  Policy::reduce(p, data, op, 0);
  const auto index = [](int r) { return static_cast<std::size_t>(r); };
  if (p.rank() != 0) {
    p.recv(0, data.first(counts[index(p.rank())]));
    return;
  }
  pending_list<Port> pending;
  std::size_t offset = counts[0];
  for (int r = 1; r < p.size(); ++r) {
    pending.push_back(p.isend(r, std::span<const E>(data.subspan(offset, counts[index(r)]))));
    offset += counts[index(r)];
  }
  p.wait_all(pending.view());
}

}  // namespace commx::coll::detail
