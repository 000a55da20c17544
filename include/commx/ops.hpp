// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Reduction operations beyond std::plus<> and std::multiplies<>.

#include <functional>

namespace commx::op {

/// The larger of two elements (the first one on ties, so ties are deterministic).
struct max {
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return a < b ? b : a;
  }
};

/// The smaller of two elements (the first one on ties).
struct min {
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return b < a ? b : a;
  }
};

}  // namespace commx::op

namespace commx {

/// Whether `op(a, b) == op(b, a)` for every a, b. Algorithms that combine in an order other
/// than rank order (ring) use it only for ops known to be commutative; for the rest they take
/// a rank-order path. Specialise it for your own commutative ops.
template <class Op>
inline constexpr bool commutative = false;

template <class T>
inline constexpr bool commutative<std::plus<T>> = true;
template <class T>
inline constexpr bool commutative<std::multiplies<T>> = true;
template <class T>
inline constexpr bool commutative<std::bit_and<T>> = true;
template <class T>
inline constexpr bool commutative<std::bit_or<T>> = true;
template <class T>
inline constexpr bool commutative<std::bit_xor<T>> = true;
template <>
inline constexpr bool commutative<op::max> = true;
template <>
inline constexpr bool commutative<op::min> = true;

}  // namespace commx
