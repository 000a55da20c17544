// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Reduction operations beyond std::plus<> and std::multiplies<>.

#include <functional>
#include <type_traits>

namespace commx::op {

/// The larger of two elements (the first one on ties, so ties are deterministic).
struct max {
  /// The larger of `a` and `b` (`a` when equal).
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return a < b ? b : a;
  }
};

/// The smaller of two elements (the first one on ties).
struct min {
  /// The smaller of `a` and `b` (`a` when equal).
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return b < a ? b : a;
  }
};

}  // namespace commx::op

namespace commx {

/// Whether `op(a, b) == op(b, a)` for every two elements of type E. Algorithms that combine in
/// an order other than rank order (ring) use it only when it is true; otherwise they take a
/// rank-order path. The standard arithmetic and bitwise function objects, max and min count as
/// commutative on arithmetic elements only: `std::multiplies<>` on matrices is not. Specialise
/// it for your own ops and types: `template <> inline constexpr bool
/// commx::commutative<my_op, my_type> = true;`.
template <class Op, class E>
inline constexpr bool commutative = false;

namespace detail {
template <class Op>
inline constexpr bool commutative_on_numbers = false;
template <class T>
inline constexpr bool commutative_on_numbers<std::plus<T>> = true;
template <class T>
inline constexpr bool commutative_on_numbers<std::multiplies<T>> = true;
template <class T>
inline constexpr bool commutative_on_numbers<std::bit_and<T>> = true;
template <class T>
inline constexpr bool commutative_on_numbers<std::bit_or<T>> = true;
template <class T>
inline constexpr bool commutative_on_numbers<std::bit_xor<T>> = true;
template <>
inline constexpr bool commutative_on_numbers<op::max> = true;
template <>
inline constexpr bool commutative_on_numbers<op::min> = true;
}  // namespace detail

/// True for std::plus, std::multiplies, the bitwise function objects, op::max and op::min on
/// arithmetic elements.
template <class Op, class E>
requires std::is_arithmetic_v<E> && detail::commutative_on_numbers<Op>
inline constexpr bool commutative<Op, E> = true;

}  // namespace commx
