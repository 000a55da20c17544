// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `local_shared<T>`: shared ownership among the handles of one rank, counted without atomics.
///
/// Every request copies its rank's state and group, and destroys them again when it ends: with
/// `std::shared_ptr` that is two locked increments and two locked decrements per message,
/// about a tenth of a windowed 8-byte receive over MPI (bench/HISTORY.md). A rank's
/// communicators and requests are used by one thread at a time (communicator.hpp's rule), so
/// their count needs no atomics: handing a rank to another thread is synchronised by whatever
/// hands it over, as it must be for the endpoint anyway. Copies must not be made or destroyed
/// in two threads at once, which that rule already forbids.

#include <cstddef>
#include <utility>

namespace commx::detail {

template <class T>
class local_shared {
 public:
  local_shared() = default;
  local_shared(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): as shared_ptr's

  /// A new T, built from `args`, with this handle its only owner.
  template <class... Args>
  [[nodiscard]] static local_shared make(Args&&... args) {
    local_shared made;
    made.block_ = new block(std::forward<Args>(args)...);
    return made;
  }

  local_shared(const local_shared& other) noexcept : block_(other.block_) {
    if (block_ != nullptr) ++block_->owners;
  }
  local_shared(local_shared&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
  local_shared& operator=(const local_shared& other) noexcept {
    local_shared(other).swap(*this);
    return *this;
  }
  local_shared& operator=(local_shared&& other) noexcept {
    local_shared(std::move(other)).swap(*this);
    return *this;
  }
  ~local_shared() { reset(); }

  // The count inline, the deletion not: whole, a handle's reset was too large for the compiler
  // to inline, and its calls cost a windowed 8-byte receive over UCX some 70 instructions of
  // its 1,150 (callgrind).
  [[gnu::always_inline]] void reset() noexcept {
    if (block_ != nullptr && --block_->owners == 0) destroy(block_);
    block_ = nullptr;
  }
  void swap(local_shared& other) noexcept { std::swap(block_, other.block_); }

  [[nodiscard]] T* get() const noexcept { return block_ != nullptr ? &block_->value : nullptr; }
  T& operator*() const noexcept { return block_->value; }
  T* operator->() const noexcept { return &block_->value; }
  explicit operator bool() const noexcept { return block_ != nullptr; }
  /// How many handles own the T (0 for an empty handle).
  [[nodiscard]] std::size_t use_count() const noexcept {
    return block_ != nullptr ? block_->owners : 0;
  }

  friend bool operator==(const local_shared& a, const local_shared& b) noexcept {
    return a.block_ == b.block_;
  }
  friend bool operator==(const local_shared& a, std::nullptr_t) noexcept {
    return a.block_ == nullptr;
  }

 private:
  struct block {
    template <class... Args>
    explicit block(Args&&... args) : value(std::forward<Args>(args)...) {}
    T value;
    std::size_t owners = 1;
  };
  [[gnu::noinline]] static void destroy(block* b) noexcept { delete b; }

  block* block_ = nullptr;
};

}  // namespace commx::detail
