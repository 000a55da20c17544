// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A lock-free single-producer/single-consumer byte ring in shared memory: one per ordered pair
/// of ranks. The producer owns `tail`, the consumer owns `head`, each on its own cache line, so
/// neither ever writes a line the other writes. Both are byte positions that only grow (64 bits
/// do not wrap in any job's lifetime); the ring's capacity is a power of two, and a record may
/// straddle the end of the buffer (it is copied in two pieces), so no space is wasted on padding.
///
/// A record is a fixed header followed by `header.payload` bytes, padded to 8. The producer
/// writes the record and then publishes it with a release store of `tail`; the consumer reads
/// `tail` with acquire, copies the record out and releases the space with a release store of
/// `head`. No lock, no system call: waking a sleeping consumer is the endpoint's business.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace commx::detail::shm {

inline constexpr std::size_t cache_line = 64;

/// The shared part of a ring: the two positions, a cache line each.
struct ring_control {
  alignas(cache_line) std::atomic<std::uint64_t> tail{0};  ///< written by the producer only
  alignas(cache_line) std::atomic<std::uint64_t> head{0};  ///< written by the consumer only
};
static_assert(sizeof(ring_control) == 2 * cache_line);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// What a record is for.
enum class record_kind : std::uint32_t {
  eager = 1,  ///< a whole message, payload inline
  rts,        ///< ready to send: a large message's envelope; the payload stays with the sender
  cts,        ///< clear to send: the receiver matched an rts and wants it through the ring
  data,       ///< a piece of a large message going through the ring after a cts
  fin,        ///< the receiver copied a large message itself (cross-memory attach): done
};

/// Every record's header; 48 bytes, so an 8-byte message fills one cache line.
struct record {
  record_kind kind{};
  std::uint32_t payload = 0;  ///< bytes that follow this header in the ring
  std::int32_t tag = 0;
  std::uint32_t ticket = 0;  ///< rts, cts, data, fin: the sender's ticket slot for the message
  std::uint64_t ctx = 0;
  std::uint64_t generation = 0;  ///< rts, cts, data, fin: which use of the ticket slot
  std::uint64_t size = 0;        ///< rts: the message's size; data: the offset of this piece
  std::uint64_t address = 0;     ///< rts: where the message is in the sender's memory
};
static_assert(sizeof(record) == 48);

constexpr std::size_t padded(std::size_t bytes) { return (bytes + 7) & ~std::size_t{7}; }

/// The space one record with `payload` bytes takes in a ring.
constexpr std::size_t record_bytes(std::size_t payload) { return sizeof(record) + padded(payload); }

/// Copies in and out of a ring's buffer, across its end when needed.
class ring_buffer {
 public:
  ring_buffer() = default;
  ring_buffer(ring_control* control, std::byte* data, std::size_t capacity)
      : control_(control), data_(data), mask_(capacity - 1) {}

  [[nodiscard]] ring_control& control() const { return *control_; }
  [[nodiscard]] std::size_t capacity() const { return mask_ + 1; }

  void put(std::uint64_t position, const void* from, std::size_t bytes) const {
    const std::size_t at = position & mask_;
    const std::size_t first = std::min(bytes, capacity() - at);
    const auto* source = static_cast<const std::byte*>(from);
    std::memcpy(data_ + at, source, first);
    if (first < bytes) std::memcpy(data_, source + first, bytes - first);
  }

  void get(std::uint64_t position, void* to, std::size_t bytes) const {
    const std::size_t at = position & mask_;
    const std::size_t first = std::min(bytes, capacity() - at);
    auto* target = static_cast<std::byte*>(to);
    std::memcpy(target, data_ + at, first);
    if (first < bytes) std::memcpy(target + first, data_, bytes - first);
  }

 private:
  ring_control* control_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t mask_ = 0;
};

/// The producer's end, with its private copies of both positions: it reads the consumer's
/// `head` only when the space it remembers is not enough.
class ring_producer {
 public:
  ring_producer() = default;
  explicit ring_producer(ring_buffer ring)
      : ring_(ring), tail_(ring.control().tail.load(std::memory_order_relaxed)) {
    head_ = ring.control().head.load(std::memory_order_acquire);
  }

  /// Whether a record with `payload` bytes fits now.
  bool fits(std::size_t payload) {
    const std::size_t need = record_bytes(payload);
    if (tail_ + need - head_ <= ring_.capacity()) return true;
    head_ = ring_.control().head.load(std::memory_order_acquire);
    return tail_ + need - head_ <= ring_.capacity();
  }

  /// Writes one record; the caller checked fits(payload.size()). Not visible until publish().
  void write(const record& header, std::span<const std::byte> payload) {
    ring_.put(tail_, &header, sizeof header);
    if (!payload.empty()) ring_.put(tail_ + sizeof header, payload.data(), payload.size());
    tail_ += record_bytes(payload.size());
  }

  /// Makes every record written so far visible to the consumer.
  void publish() { ring_.control().tail.store(tail_, std::memory_order_release); }

  /// Whether the consumer has freed space since we last looked (one load, nothing written).
  [[nodiscard]] bool room_freed() const {
    return ring_.control().head.load(std::memory_order_acquire) != head_;
  }

 private:
  ring_buffer ring_;
  std::uint64_t tail_ = 0;
  std::uint64_t head_ = 0;
};

/// The consumer's end: `peek` the next record's header, copy its payload out, then `pop` it.
class ring_consumer {
 public:
  ring_consumer() = default;
  explicit ring_consumer(ring_buffer ring)
      : ring_(ring), head_(ring.control().head.load(std::memory_order_relaxed)) {
    tail_ = ring.control().tail.load(std::memory_order_acquire);
  }

  /// True when a record is waiting; then `header` holds its header.
  bool peek(record& header) {
    if (head_ == tail_) {
      tail_ = ring_.control().tail.load(std::memory_order_acquire);
      if (head_ == tail_) return false;
    }
    ring_.get(head_, &header, sizeof header);
    return true;
  }

  /// Whether the producer has published something not yet consumed (one load, no copy).
  [[nodiscard]] bool has_data() const {
    return head_ != tail_ || ring_.control().tail.load(std::memory_order_acquire) != head_;
  }

  /// Copies `bytes` of the current record's payload, from `offset`, to `to`.
  void read_payload(std::size_t offset, void* to, std::size_t bytes) const {
    if (bytes != 0) ring_.get(head_ + sizeof(record) + offset, to, bytes);
  }

  /// Releases the current record's space to the producer.
  void pop(const record& header) {
    head_ += record_bytes(header.payload);
    ring_.control().head.store(head_, std::memory_order_release);
  }

 private:
  ring_buffer ring_;
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
};

}  // namespace commx::detail::shm
