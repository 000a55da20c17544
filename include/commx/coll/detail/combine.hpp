// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The element-wise step every reduction is made of.

#include <cstddef>
#include <span>

namespace commx::coll::detail {

/// acc[i] = op(acc[i], in[i]): the accumulator is always the left operand, so a policy that
/// folds in rank order gets the same bits for non-associative floating-point sums everywhere.
template <class E, class Op>
void combine_into(std::span<E> acc, std::span<const E> in, Op& op) {
  for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = op(acc[i], in[i]);
}

/// acc[i] = op(earlier[i], acc[i]): folds contributions of lower ranks in on the left, so that
/// a prefix received from below needs no copy of its own.
template <class E, class Op>
void combine_from_left(std::span<const E> earlier, std::span<E> acc, Op& op) {
  for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = op(earlier[i], acc[i]);
}

}  // namespace commx::coll::detail
