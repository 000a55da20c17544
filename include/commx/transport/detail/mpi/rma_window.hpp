// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A commx window passed through to MPI-3 RMA (window.hpp chooses it on transport::mpi): the
/// window is an MPI window (MPI_Win_create over the caller's span, MPI_Win_allocate for memory
/// it allocates), held in one passive epoch for its whole life (MPI_Win_lock_all with
/// MPI_MODE_NOCHECK), so that every commx synchronisation maps onto calls MPI allows there:
///
/// | commx | MPI |
/// |---|---|
/// | put, get | MPI_Put, MPI_Get (bytes; the target displacement in elements) |
/// | accumulate | MPI_Accumulate with MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_REPLACE |
/// | fetch_and_op, compare_and_swap | MPI_Get_accumulate, MPI_Compare_and_swap (on the element's bits), then MPI_Win_flush |
/// | flush, flush_all | MPI_Win_flush, MPI_Win_flush_all |
/// | fence | MPI_Win_flush_all, MPI_Win_sync, MPI_Barrier, MPI_Win_sync |
/// | lock, unlock | a lock word per rank in a second MPI window, taken with MPI_Compare_and_swap / MPI_Fetch_and_op (MPI_Win_lock is not allowed inside lock_all) |
/// | free | MPI_Win_unlock_all, MPI_Win_free (collective) |
///
/// MPI ends the job when a rank fails, so there is no peer loss to report here.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "commx/coll/detail/native/types.hpp"
#include "commx/detail/communicator_access.hpp"
#include "commx/detail/window_ops.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/mpi/call.hpp"

namespace commx::detail::mpi {

/// MPI's op for a window op.
inline MPI_Op rma_op(window_op op) {
  switch (op) {
    case window_op::sum:
      return MPI_SUM;
    case window_op::product:
      return MPI_PROD;
    case window_op::min:
      return MPI_MIN;
    case window_op::max:
      return MPI_MAX;
    case window_op::bit_and:
      return MPI_BAND;
    case window_op::bit_or:
      return MPI_BOR;
    case window_op::bit_xor:
      return MPI_BXOR;
    case window_op::replace:
      return MPI_REPLACE;
    case window_op::no_op:
      return MPI_NO_OP;
  }
  return MPI_OP_NULL;
}

/// The unsigned integer type of E's size, whose MPI type compare-and-swap takes.
template <std::size_t Size>
struct bits_of_size;
template <>
struct bits_of_size<1> {
  using type = std::uint8_t;
};
template <>
struct bits_of_size<2> {
  using type = std::uint16_t;
};
template <>
struct bits_of_size<4> {
  using type = std::uint32_t;
};
template <>
struct bits_of_size<8> {
  using type = std::uint64_t;
};

/// Element types MPI windows carry here: those compare-and-swap can take as bits.
template <class E>
inline constexpr bool rma_element = sizeof(E) == 1 || sizeof(E) == 2 || sizeof(E) == 4 ||
                                    sizeof(E) == 8;

/// See the file comment.
template <class E>
class rma_window {
  static_assert(rma_element<E>);
  using bits = typename bits_of_size<sizeof(E)>::type;

 public:
  /// Collective over `comm`: exposes `*given`, or `count` value-initialised elements MPI
  /// allocates. `ok()` is false, on every rank, when MPI could not make the window on some
  /// rank (Open MPI makes none over a caller's memory without an RDMA-capable transport).
  template <class Comm>
  rma_window(Comm& own, std::span<E>* given, std::size_t count, clock::time_point /*when*/)
      : rma_window(own.transport().communicator_of(communicator_access::context(own)), given,
                   count) {}
  rma_window(MPI_Comm comm, std::span<E>* given, std::size_t count) : comm_(comm) {
    const auto bytes = static_cast<MPI_Aint>(count * sizeof(E));
    int made = MPI_SUCCESS;
    E* base = given != nullptr ? given->data() : nullptr;
    if (given != nullptr) {
      made = MPI_Win_create(given->data(), bytes, sizeof(E), MPI_INFO_NULL, comm, &win_);
    } else {
      made = MPI_Win_allocate(bytes, sizeof(E), MPI_INFO_NULL, comm, &base, &win_);
    }
    int everywhere = made == MPI_SUCCESS ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    if (everywhere == 0) {
      if (made == MPI_SUCCESS) (void)MPI_Win_free(&win_);
      why_ = made == MPI_SUCCESS
                 ? std::string("another rank could not make it")
                 : describe(made, given != nullptr ? "MPI_Win_create" : "MPI_Win_allocate");
      win_ = MPI_WIN_NULL;
      return;
    }
    if (given == nullptr) std::uninitialized_value_construct_n(base, count);
    local_ = std::span<E>(base, count);
    std::int64_t* word = nullptr;
    check(MPI_Win_allocate(sizeof(std::int64_t), sizeof(std::int64_t), MPI_INFO_NULL, comm, &word,
                           &locks_),
          "MPI_Win_allocate");
    *word = 0;
    check(MPI_Barrier(comm), "MPI_Barrier");  // every element and lock word is set up
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all");
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, locks_), "MPI_Win_lock_all");
  }
  rma_window(const rma_window&) = delete;
  rma_window& operator=(const rma_window&) = delete;
  // An unfreed window is left to MPI_Finalize: freeing is collective, and a destructor that
  // runs on one rank only (an exception) must not wait for the others.
  ~rma_window() = default;

  [[nodiscard]] bool ok() const { return win_ != MPI_WIN_NULL; }
  [[nodiscard]] const std::string& why_not() const { return why_; }
  [[nodiscard]] std::span<E> local() const { return local_; }

  void put(std::span<const std::byte> data, int target, std::size_t offset) {
    const int n = coll::detail::native::count_of(data.size(), "window put");
    check(MPI_Put(data.data(), n, MPI_BYTE, target, disp(offset), n, MPI_BYTE, win_), "MPI_Put");
  }
  void get(std::span<std::byte> into, int target, std::size_t offset) {
    const int n = coll::detail::native::count_of(into.size(), "window get");
    check(MPI_Get(into.data(), n, MPI_BYTE, target, disp(offset), n, MPI_BYTE, win_), "MPI_Get");
  }
  void accumulate(std::span<const E> data, int target, std::size_t offset, window_op op,
                  clock::time_point /*when*/) {
    const auto [type, n] = typed(data.size(), "window accumulate");
    check(MPI_Accumulate(data.data(), n, type, target, disp(offset), n, type, rma_op(op), win_),
          "MPI_Accumulate");
  }
  E fetch_and_op(const E& value, int target, std::size_t offset, window_op op,
                 clock::time_point when) {
    const auto [type, n] = typed(1, "window fetch_and_op");
    E old{};
    check(MPI_Get_accumulate(&value, n, type, &old, n, type, target, disp(offset), n, type,
                             rma_op(op), win_),
          "MPI_Get_accumulate");
    flush(target, when);
    return old;
  }
  E compare_and_swap(const E& expected, const E& desired, int target, std::size_t offset,
                     clock::time_point when) {
    bits want{};
    bits put{};
    bits old{};
    std::memcpy(&want, &expected, sizeof(E));
    std::memcpy(&put, &desired, sizeof(E));
    check(MPI_Compare_and_swap(&put, &want, &old, coll::detail::native::predefined_type<bits>(),
                               target, disp(offset), win_),
          "MPI_Compare_and_swap");
    flush(target, when);
    E result{};
    std::memcpy(&result, &old, sizeof(E));
    return result;
  }

  /// Makes what others wrote visible to this rank's loads, and its stores to them.
  void sync() const { check(MPI_Win_sync(win_), "MPI_Win_sync"); }
  // MPI's calls take no deadline: MPI ends the job rather than let one wait for a dead rank.
  void flush(int target, clock::time_point /*when*/) {
    check(MPI_Win_flush(target, win_), "MPI_Win_flush");
  }
  void flush_all(clock::time_point /*when*/) {
    check(MPI_Win_flush_all(win_), "MPI_Win_flush_all");
  }
  void fence(clock::time_point when) {
    flush_all(when);
    check(MPI_Win_sync(win_), "MPI_Win_sync");
    check(MPI_Barrier(comm_), "MPI_Barrier");
    check(MPI_Win_sync(win_), "MPI_Win_sync");
  }

  /// Takes `target`'s lock word if it is free for `type`; false otherwise (remote_lock_word).
  bool try_lock(int target, lock_type type, clock::time_point /*when*/) {
    return remote_lock_word::try_lock(
        type,
        [&](std::int64_t expected, std::int64_t desired) {
          std::int64_t seen = 0;
          check(MPI_Compare_and_swap(&desired, &expected, &seen, MPI_INT64_T, target, 0, locks_),
                "MPI_Compare_and_swap");
          check(MPI_Win_flush(target, locks_), "MPI_Win_flush");
          return seen;
        },
        [&](std::int64_t delta) { return add_to_word(target, delta); });
  }
  void unlock(int target, lock_type type, clock::time_point when) {
    flush(target, when);
    remote_lock_word::unlock(type, [&](std::int64_t delta) { return add_to_word(target, delta); });
  }

  /// Collective: ends the epoch and frees MPI's windows.
  void free() {
    if (win_ == MPI_WIN_NULL) return;
    check(MPI_Win_unlock_all(win_), "MPI_Win_unlock_all");
    check(MPI_Win_unlock_all(locks_), "MPI_Win_unlock_all");
    check(MPI_Win_free(&win_), "MPI_Win_free");
    check(MPI_Win_free(&locks_), "MPI_Win_free");
  }

 private:
  static MPI_Aint disp(std::size_t offset) { return static_cast<MPI_Aint>(offset); }

  static std::string describe(int code, const char* call) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    (void)MPI_Error_string(code, text, &length);
    return std::string(call) + ": " + std::string(text, static_cast<std::size_t>(length));
  }

  // MPI's type for elements of E: the predefined one for arithmetic E, else bytes (which only
  // op::replace and op::no_op reach: window_op_of allows no other).
  static std::pair<MPI_Datatype, int> typed(std::size_t count, const char* operation) {
    if constexpr (coll::detail::native::has_predefined_type<E>) {
      return {coll::detail::native::predefined_type<E>(),
              coll::detail::native::count_of(count, operation)};
    } else {
      return {MPI_BYTE, coll::detail::native::count_of(count * sizeof(E), operation)};
    }
  }

  // Adds `delta` to `target`'s lock word; what it held before.
  std::int64_t add_to_word(int target, std::int64_t delta) {
    std::int64_t before = 0;
    check(MPI_Fetch_and_op(&delta, &before, MPI_INT64_T, target, 0, MPI_SUM, locks_),
          "MPI_Fetch_and_op");
    check(MPI_Win_flush(target, locks_), "MPI_Win_flush");
    return before;
  }

  MPI_Comm comm_;
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Win locks_ = MPI_WIN_NULL;
  std::span<E> local_;
  std::string why_;
};

}  // namespace commx::detail::mpi
