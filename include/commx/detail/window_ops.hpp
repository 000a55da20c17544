// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The operations a window's accumulate takes, numbered so a target (or MPI) can apply them,
/// and how an element is combined: atomically where the element is lock-free.

#include <atomic>
#include <cstdint>
#include <functional>
#include <type_traits>

#include "commx/ops.hpp"

namespace commx::op {

/// The target's element becomes the origin's (MPI_REPLACE): accumulate as an atomic put.
struct replace {
  /// `b`, the origin's element.
  template <class E>
  constexpr E operator()(const E& /*a*/, const E& b) const {
    return b;
  }
};

/// The target's element stays (MPI_NO_OP): fetch_and_op as an atomic get.
struct no_op {
  /// `a`, the target's element.
  template <class E>
  constexpr E operator()(const E& a, const E& /*b*/) const {
    return a;
  }
};

}  // namespace commx::op

namespace commx {

/// How `window::lock` holds a target: alone, or with other shared holders.
enum class lock_type : std::uint32_t { exclusive = 1, shared = 2 };

}  // namespace commx

namespace commx::detail {

/// A window's lock where it is one word at the target reached by a compare-and-swap and a
/// fetching add (rma_window on mpi and on ucx). The word counts shared holders; an exclusive
/// holder swaps 0 for `exclusive_mark`, so far below zero that shared takers, which add one and
/// look, still see it negative (with -1 as the mark, a shared taker would see 0, take the lock
/// beside the exclusive holder, and leave the word at -1 for good once both had unlocked). The
/// exclusive holder gives the mark back by adding, not by storing zero, so that a shared
/// taker's passing +1 and -1 around it are not lost. `swap_if(expected, desired)` and
/// `add(delta)` act on the target's word and return what it held before.
struct remote_lock_word {
  static constexpr std::int64_t exclusive_mark = -(std::int64_t{1} << 40);

  template <class SwapIf, class Add>
  static bool try_lock(lock_type type, SwapIf&& swap_if, Add&& add) {
    if (type == lock_type::exclusive) return swap_if(std::int64_t{0}, exclusive_mark) == 0;
    if (add(std::int64_t{1}) + 1 >= 0) return true;
    (void)add(std::int64_t{-1});  // an exclusive holder: take the share back
    return false;
  }
  template <class Add>
  static void unlock(lock_type type, Add&& add) {
    (void)add(type == lock_type::exclusive ? -exclusive_mark : std::int64_t{-1});
  }
};

/// The ops a window knows, as numbers on the wire.
enum class window_op : std::uint32_t {
  sum = 1,
  product,
  min,
  max,
  bit_and,
  bit_or,
  bit_xor,
  replace,
  no_op,
};

template <class Op>
inline constexpr bool is_window_op =
    std::is_same_v<Op, std::plus<>> || std::is_same_v<Op, std::multiplies<>> ||
    std::is_same_v<Op, op::min> || std::is_same_v<Op, op::max> ||
    std::is_same_v<Op, std::bit_and<>> || std::is_same_v<Op, std::bit_or<>> ||
    std::is_same_v<Op, std::bit_xor<>> || std::is_same_v<Op, op::replace> ||
    std::is_same_v<Op, op::no_op>;

/// The number of `Op` for elements of type E; does not compile for an op a window cannot apply.
template <class Op, class E>
consteval window_op window_op_of() {
  static_assert(is_window_op<Op>,
                "commx: a window applies std::plus<>, std::multiplies<>, op::min, op::max, "
                "std::bit_and<>, std::bit_or<>, std::bit_xor<>, op::replace or op::no_op");
  constexpr bool bitwise = std::is_same_v<Op, std::bit_and<>> ||
                           std::is_same_v<Op, std::bit_or<>> || std::is_same_v<Op, std::bit_xor<>>;
  constexpr bool replacing = std::is_same_v<Op, op::replace> || std::is_same_v<Op, op::no_op>;
  static_assert(replacing || std::is_arithmetic_v<E>,
                "commx: a window combines arithmetic elements; other types take op::replace "
                "and op::no_op only");
  static_assert(!bitwise || std::is_integral_v<E>, "commx: bitwise ops take integral elements");
  if constexpr (std::is_same_v<Op, std::plus<>>) return window_op::sum;
  if constexpr (std::is_same_v<Op, std::multiplies<>>) return window_op::product;
  if constexpr (std::is_same_v<Op, op::min>) return window_op::min;
  if constexpr (std::is_same_v<Op, op::max>) return window_op::max;
  if constexpr (std::is_same_v<Op, std::bit_and<>>) return window_op::bit_and;
  if constexpr (std::is_same_v<Op, std::bit_or<>>) return window_op::bit_or;
  if constexpr (std::is_same_v<Op, std::bit_xor<>>) return window_op::bit_xor;
  if constexpr (std::is_same_v<Op, op::replace>) return window_op::replace;
  if constexpr (std::is_same_v<Op, op::no_op>) return window_op::no_op;
}

/// `a op b` for the op numbered `which`; false for a number no op has (or one E cannot take).
template <class E>
bool combine(window_op which, const E& a, const E& b, E& out) {
  switch (which) {
    case window_op::replace:
      out = b;
      return true;
    case window_op::no_op:
      out = a;
      return true;
    default:
      break;
  }
  if constexpr (std::is_arithmetic_v<E>) {
    switch (which) {
      case window_op::sum:
        out = static_cast<E>(a + b);
        return true;
      case window_op::product:
        out = static_cast<E>(a * b);
        return true;
      case window_op::min:
        out = op::min{}(a, b);
        return true;
      case window_op::max:
        out = op::max{}(a, b);
        return true;
      default:
        break;
    }
  }
  if constexpr (std::is_integral_v<E>) {
    switch (which) {
      case window_op::bit_and:
        out = static_cast<E>(a & b);
        return true;
      case window_op::bit_or:
        out = static_cast<E>(a | b);
        return true;
      case window_op::bit_xor:
        out = static_cast<E>(a ^ b);
        return true;
      default:
        break;
    }
  }
  return false;
}

/// Whether elements of type E can be combined in place with one atomic instruction sequence
/// (a compare-and-swap loop): true for lock-free sizes.
template <class E>
inline constexpr bool atomic_element =
    std::is_trivially_copyable_v<E>&& std::atomic_ref<E>::is_always_lock_free;

/// `target = target op operand`, atomically, returning the old value; false (nothing written)
/// for an op number E cannot take.
template <class E>
bool combine_atomically(window_op which, E& target, const E& operand, E& old) {
  static_assert(atomic_element<E>);
  std::atomic_ref<E> cell(target);
  E seen = cell.load(std::memory_order_relaxed);
  E next{};
  do {
    if (!combine(which, seen, operand, next)) return false;
  } while (!cell.compare_exchange_weak(seen, next, std::memory_order_acq_rel,
                                       std::memory_order_relaxed));
  old = seen;
  return true;
}

}  // namespace commx::detail
