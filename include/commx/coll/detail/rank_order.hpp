// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What `reduction_order::reproducible` runs: a policy's collectives, except that every
/// reduction folds in rank order, left to right, as flat's do. The result is the same bits
/// under every policy; the data movement around it (allreduce's bcast) stays the policy's.

#include <cstddef>
#include <span>

#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/flat.hpp"

namespace commx::coll::detail {

template <class Policy>
struct rank_order_over : Policy {
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    flat::reduce(p, data, op, root);
  }

  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    flat::reduce(p, data, op, 0);
    Policy::bcast(p, data, 0);
  }

  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    flat::scan(p, data, op);
  }

  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    flat::exscan(p, data, op);
  }

  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    reduce_scatter_through_zero<flat>(p, data, counts, op);
  }
};

}  // namespace commx::coll::detail
