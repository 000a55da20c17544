// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Room a collective needs for one call, in place when it is small: `inline_list<T, N>`, the
/// messages it has in flight (a binomial root has log2 p of them, a flat one p), and
/// `scratch<E>`, a reduction's incoming elements. A `std::vector` there cost each call a malloc
/// and a free: an eighth of an 8-byte broadcast's instructions on its root (callgrind).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace commx::coll::detail {

template <class T, std::size_t N>
class inline_list {
 public:
  inline_list() = default;
  inline_list(const inline_list&) = delete;
  inline_list& operator=(const inline_list&) = delete;
  ~inline_list() { std::destroy_n(in_place(), in_place_count_); }

  /// Room for `n` elements in all: beyond N they move to the heap now, not one by one.
  void reserve(std::size_t n) {
    if (n > N && !on_heap()) spill(n);
  }

  void push_back(T&& value) {
    if (in_place_count_ == N && !on_heap()) spill(2 * N);
    if (on_heap()) {
      heap_.push_back(std::move(value));
    } else {
      ::new (static_cast<void*>(in_place() + in_place_count_)) T(std::move(value));
      ++in_place_count_;
    }
  }

  /// The elements, contiguous wherever they are.
  [[nodiscard]] std::span<T> view() {
    return on_heap() ? std::span<T>(heap_) : std::span<T>(in_place(), in_place_count_);
  }

 private:
  [[nodiscard]] bool on_heap() const { return heap_.capacity() != 0; }
  T* in_place() { return std::launder(reinterpret_cast<T*>(storage_)); }

  void spill(std::size_t capacity) {
    heap_.reserve(std::max(capacity, N + 1));
    for (std::size_t i = 0; i < in_place_count_; ++i) heap_.push_back(std::move(in_place()[i]));
    std::destroy_n(in_place(), in_place_count_);
    in_place_count_ = 0;
  }

  alignas(T) std::byte storage_[N * sizeof(T)];
  std::size_t in_place_count_ = 0;
  std::vector<T> heap_;  // in use once it has capacity (on_heap)
};

/// `n` elements of scratch space, in place up to `Bytes` for elements that need no construction,
/// else on the heap; default-initialised, so numbers hold nothing defined until the caller
/// receives or copies into them, as every caller does first. Zeroing them cost a large
/// allreduce or reduce 7-37% of its time on shm (bench/HISTORY.md, 2026-12-04).
template <class E, std::size_t Bytes = 256>
class scratch {
 public:
  explicit scratch(std::size_t n) {
    if (n * sizeof(E) <= Bytes && std::is_trivially_default_constructible_v<E> &&
        std::is_trivially_destructible_v<E>) {
      view_ = std::span<E>(std::launder(reinterpret_cast<E*>(storage_)), n);
      std::uninitialized_default_construct(view_.begin(), view_.end());
    } else {
      heap_ = std::make_unique_for_overwrite<E[]>(n);
      view_ = std::span<E>(heap_.get(), n);
    }
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  [[nodiscard]] std::span<E> view() const { return view_; }

 private:
  alignas(E) std::byte storage_[Bytes];
  std::unique_ptr<E[]> heap_;
  std::span<E> view_;
};

/// A policy's messages in flight: room for a binomial tree's on 256 ranks in place.
template <class Port>
using pending_list = inline_list<typename Port::pending, 8>;

}  // namespace commx::coll::detail
