// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The vocabulary every transport speaks: envelopes, receive buffers and operation results.
/// A transport moves tagged byte messages between world ranks; types, communicators' local
/// ranks and serialization live above it, in the communicator.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "commx/error.hpp"

namespace commx {

/// Matches a message from any source in a receive or probe.
inline constexpr int any_source = -2;
/// Matches a message with any tag in a receive or probe.
inline constexpr int any_tag = -3;
/// The largest tag a user may use; tags are in [0, max_tag].
inline constexpr int max_tag = (1 << 30) - 1;

/// Identifies a communicator. Messages only match receives of the same context, which is how
/// messages of different communicators never match each other.
using context_id = std::uint64_t;

namespace transport {

/// Where a received message goes: a fixed buffer, or a container that is resized to fit.
/// A transport calls `prepare(n)` once it knows the message's size, and writes the payload
/// to the pointer it returns. Every check happens in `prepare`, before a byte is written.
class recv_buffer {
 public:
  /// Resizes `container` to hold `bytes` and returns where to write them; or sets `ec`
  /// (errc::truncated, errc::type_mismatch) and returns nullptr, writing nothing.
  using grow_fn = std::byte* (*)(void* container, std::size_t bytes, std::error_code& ec);

  /// A fixed buffer: a longer message fails with errc::truncated and writes nothing. With
  /// `element` > 1, a message that is not a whole number of elements fails with
  /// errc::type_mismatch; with `exact`, so does any message but one of exactly `fixed.size()`.
  constexpr explicit recv_buffer(std::span<std::byte> fixed, std::size_t element = 1,
                                 bool exact = false)
      : data_(fixed.data()), capacity_(fixed.size()), element_(element), exact_(exact) {}

  /// A growable container: `grow(container, n, ec)` resizes it to n bytes and returns its data,
  /// or sets ec (e.g. errc::type_mismatch when n is not a whole number of its elements).
  constexpr recv_buffer(void* container, grow_fn grow) : container_(container), grow_(grow) {}

  /// Copied field by field: a buffer is built just before a transport copies it into its
  /// receive, and a copy in 16-byte pieces (the compiler's way with a plain copy) reads back
  /// fields written one by one a moment before, a store-forwarding stall per message. The
  /// fences keep the compiler from merging the pieces again.
  recv_buffer(const recv_buffer& other) noexcept { copy_from(other); }
  /// Copied field by field (see the copy constructor).
  recv_buffer& operator=(const recv_buffer& other) noexcept {
    copy_from(other);
    return *this;
  }
  ~recv_buffer() = default;

  /// Where to write a message of `bytes` bytes, or nullptr with `ec` set. Writes nothing.
  /// (A zero-byte message may get nullptr without error: check `ec`, not the pointer.)
  std::byte* prepare(std::size_t bytes, std::error_code& ec) const {
    if (grow_ != nullptr) return grow_(container_, bytes, ec);
    if (bytes > capacity_) {
      ec = make_error_code(errc::truncated);
    } else if ((exact_ && bytes != capacity_) || bytes % element_ != 0) {
      ec = make_error_code(errc::type_mismatch);
    }
    return ec ? nullptr : data_;
  }

  /// Capacity of a fixed buffer; for a growable one, the largest size it accepts.
  [[nodiscard]] constexpr std::size_t capacity() const {
    return grow_ != nullptr ? static_cast<std::size_t>(-1) : capacity_;
  }

 private:
  void copy_from(const recv_buffer& other) noexcept {
    data_ = other.data_;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    capacity_ = other.capacity_;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    element_ = other.element_;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    exact_ = other.exact_;
    container_ = other.container_;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    grow_ = other.grow_;
  }

  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t element_ = 1;
  bool exact_ = false;
  void* container_ = nullptr;
  grow_fn grow_ = nullptr;
};

/// An empty error code, to copy: `std::error_code{}` and `clear()` call the library's
/// `system_category()` out of line, several times per message on a hot path.
inline const std::error_code no_error{};

/// How an operation ended, or what a probe found. For a receive or probe, `source` is the world
/// rank that sent the message, `tag` its tag and `bytes` its size (also on errc::truncated, so
/// the caller can say how large the message was). `error` is empty on success.
struct op_result {
  int source = any_source;           ///< the matched source (world rank)
  int tag = any_tag;                 ///< the matched tag
  std::size_t bytes = 0;             ///< the message's size in bytes
  std::error_code error = no_error;  ///< empty on success
};

}  // namespace transport
}  // namespace commx
