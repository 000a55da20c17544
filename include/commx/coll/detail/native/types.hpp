// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// C++ element types and reduction ops as MPI sees them: arithmetic types as MPI's own types,
/// std::plus and friends as MPI_SUM and friends (so MPI may use its fastest reductions), and
/// anything else as a contiguous byte type with a user op made by MPI_Op_create.

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "commx/error.hpp"
#include "commx/ops.hpp"
#include "commx/transport/detail/mpi/call.hpp"

namespace commx::coll::detail::native {

using commx::detail::mpi::check;

/// Whether MPI has a predefined type for E (bool has none that C++ can rely on).
template <class E>
inline constexpr bool has_predefined_type = std::is_floating_point_v<E> ||
                                            (std::is_integral_v<E> &&
                                             !std::is_same_v<std::remove_cv_t<E>, bool> &&
                                             sizeof(E) <= 8);

/// MPI's predefined type for an arithmetic E, or MPI_DATATYPE_NULL.
template <class E>
MPI_Datatype predefined_type() {
  using T = std::remove_cv_t<E>;
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_same_v<T, char>)
    return MPI_CHAR;
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    constexpr bool s = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1)
      return s ? MPI_INT8_T : MPI_UINT8_T;
    else if constexpr (sizeof(T) == 2)
      return s ? MPI_INT16_T : MPI_UINT16_T;
    else if constexpr (sizeof(T) == 4)
      return s ? MPI_INT32_T : MPI_UINT32_T;
    else if constexpr (sizeof(T) == 8)
      return s ? MPI_INT64_T : MPI_UINT64_T;
    else
      return MPI_DATATYPE_NULL;
  } else {
    return MPI_DATATYPE_NULL;
  }
}

/// The MPI datatype of one E: predefined for arithmetic types, else sizeof(E) contiguous bytes
/// (made and committed once per size; MPI_Finalize frees it).
template <class E>
MPI_Datatype datatype() {
  if constexpr (has_predefined_type<E>) {
    return predefined_type<E>();
  } else if constexpr (sizeof(E) == 1) {
    return MPI_BYTE;
  } else {
    static const MPI_Datatype bytes = [] {
      MPI_Datatype t = MPI_DATATYPE_NULL;
      check(MPI_Type_contiguous(static_cast<int>(sizeof(E)), MPI_BYTE, &t), "MPI_Type_contiguous");
      check(MPI_Type_commit(&t), "MPI_Type_commit");
      return t;
    }();
    return bytes;
  }
}

/// An element count as MPI's int.
/// @throws commx::error errc::invalid_argument past INT_MAX elements.
inline int count_of(std::size_t n, const char* operation) {
  if (n > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
    throw error(
        errc::invalid_argument,
        fmt::format("{}: {} elements is more than MPI's int counts can hold", operation, n));
  }
  return static_cast<int>(n);
}

// Predefined ops, on the element types MPI defines them for.
template <class Op, class E>
MPI_Op predefined_op() {
  using T = std::remove_cv_t<E>;
  constexpr bool integer = has_predefined_type<T> && std::is_integral_v<T>;
  if constexpr (!has_predefined_type<T>) {
    return MPI_OP_NULL;
  } else if constexpr (std::is_same_v<Op, std::plus<>> || std::is_same_v<Op, std::plus<T>>) {
    return MPI_SUM;
  } else if constexpr (std::is_same_v<Op, std::multiplies<>> ||
                       std::is_same_v<Op, std::multiplies<T>>) {
    return MPI_PROD;
  } else if constexpr (std::is_same_v<Op, op::max>) {
    return MPI_MAX;
  } else if constexpr (std::is_same_v<Op, op::min>) {
    return MPI_MIN;
  } else if constexpr (integer && (std::is_same_v<Op, std::bit_and<>> ||
                                   std::is_same_v<Op, std::bit_and<T>>)) {
    return MPI_BAND;
  } else if constexpr (integer &&
                       (std::is_same_v<Op, std::bit_or<>> || std::is_same_v<Op, std::bit_or<T>>)) {
    return MPI_BOR;
  } else if constexpr (integer && (std::is_same_v<Op, std::bit_xor<>> ||
                                   std::is_same_v<Op, std::bit_xor<T>>)) {
    return MPI_BXOR;
  } else {
    return MPI_OP_NULL;
  }
}

/// The op this thread's current reduction runs, for the MPI_User_function below: MPI calls it
/// back during the collective, on the calling thread, with nowhere to pass the op object.
template <class Op, class E>
inline thread_local Op* active_op = nullptr;

/// MPI's user-function contract: inout[i] = in[i] op inout[i], `in` holding the lower ranks'
/// contribution, so non-commutative ops fold in rank order.
template <class Op, class E>
void apply_user_op(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const E* left = static_cast<const E*>(in);
  E* acc = static_cast<E*>(inout);
  Op& op = *active_op<Op, E>;
  for (int i = 0; i < *len; ++i) acc[i] = op(left[i], acc[i]);
}

/// An MPI op for (Op, E) for the duration of one collective.
template <class Op, class E>
class reduction_op {
 public:
  explicit reduction_op(Op& op) {
    handle_ = predefined_op<Op, E>();
    if (handle_ != MPI_OP_NULL) return;
    // Made once per (Op, E): the function reads the op object through active_op.
    static const MPI_Op made = [] {
      MPI_Op h = MPI_OP_NULL;
      check(MPI_Op_create(&apply_user_op<Op, E>, commutative<Op, E> ? 1 : 0, &h), "MPI_Op_create");
      return h;
    }();
    handle_ = made;
    previous_ = std::exchange(active_op<Op, E>, &op);
    user_ = true;
  }
  reduction_op(const reduction_op&) = delete;
  reduction_op& operator=(const reduction_op&) = delete;
  ~reduction_op() {
    if (user_) active_op<Op, E> = previous_;
  }

  [[nodiscard]] MPI_Op handle() const { return handle_; }

 private:
  MPI_Op handle_ = MPI_OP_NULL;
  Op* previous_ = nullptr;
  bool user_ = false;
};

}  // namespace commx::coll::detail::native
