// SPDX-License-Identifier: MIT
//
// The model of one direction of an emulated wide-area link, free of system calls so that it can
// be tested alone (tests/wan/link_model_test.cpp):
//
//   arriving packet -> random loss -> bottleneck queue (tail drop) -> serialisation at the link
//   rate -> propagation delay -> delivered
//
// The bottleneck is modelled by the time at which the link finishes sending the packets already
// accepted (`link_free_at`): a packet arriving at t starts being sent at max(t, link_free_at),
// takes len * 8 / rate to send and is delivered one propagation delay after that. The queue
// occupancy seen by an arriving packet is the backlog (link_free_at - t) * rate / 8, so tail
// drop needs no separate queue. Delivery times are non-decreasing in arrival order, so the delay
// line is a FIFO: a ring of variable-length records in one preallocated byte buffer
// (no allocation per packet; a small packet takes a small slot).

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>

namespace wanemu {

/// Nanoseconds on one monotonic clock (CLOCK_MONOTONIC in the program, anything in tests).
using nanoseconds = std::int64_t;

/// The parameters of one direction of the link.
struct link_params {
  nanoseconds delay_ns = 0;       ///< one-way propagation delay
  double rate_bps = 0;            ///< bottleneck rate in bits per second; 0: unlimited
  std::uint64_t queue_bytes = 0;  ///< bottleneck queue limit (packets beyond it are dropped)
  double loss = 0;                ///< probability that a packet is dropped at random, in [0, 1]
  std::uint64_t seed = 1;         ///< seed of the loss process (same seed: same drop pattern)
};

/// What happened to the packets of one direction.
struct link_counters {
  std::uint64_t packets_in = 0;  ///< packets offered to the link
  std::uint64_t bytes_in = 0;
  std::uint64_t dropped_loss = 0;   ///< dropped by the random loss process
  std::uint64_t dropped_queue = 0;  ///< dropped because the bottleneck queue was full
  std::uint64_t dropped_ring = 0;   ///< dropped because the delay line's buffer was full
  std::uint64_t packets_out = 0;    ///< packets delivered to the far side
  std::uint64_t bytes_out = 0;
  std::uint64_t max_queue_bytes = 0;  ///< largest backlog seen by an accepted packet
};

/// The delay line: a FIFO of packets, each with its delivery time, stored back to back in one
/// byte ring. A record is a 16-byte header followed by the packet padded to 16 bytes; a record
/// never wraps (a wrap marker fills the end of the buffer instead).
class delay_ring {
 public:
  /// A ring of `capacity_bytes` (rounded up to 16) that accepts packets of up to `max_packet`
  /// bytes.
  delay_ring(std::size_t capacity_bytes, std::size_t max_packet)
      : capacity_(round_up(std::max(capacity_bytes, 2 * record_size(max_packet)))),
        max_packet_(max_packet),
        buffer_(new std::byte[capacity_]) {}

  /// Where the next packet (at most max_packet() bytes) is to be written, or nullptr when the
  /// ring has no room for a packet that large. Nothing is committed until commit().
  std::byte* prepare() {
    const std::size_t need = record_size(max_packet_);
    if (tail_ + need > capacity_) {  // does not fit before the end: start over at offset 0
      if (used_ + (capacity_ - tail_) + need > capacity_) return nullptr;
      prepared_at_ = 0;
      wrap_pending_ = true;
    } else {
      if (used_ + need > capacity_) return nullptr;
      prepared_at_ = tail_;
      wrap_pending_ = false;
    }
    return buffer_.get() + prepared_at_ + header_size;
  }

  /// Appends the packet of `length` bytes written at the last prepare() pointer.
  void commit(std::size_t length, nanoseconds deliver_at) {
    if (wrap_pending_) {
      write_header(tail_, header{deliver_at, wrap_marker});
      used_ += capacity_ - tail_;
      tail_ = 0;
    }
    write_header(tail_, header{deliver_at, static_cast<std::uint32_t>(length)});
    const std::size_t size = record_size(length);
    tail_ += size;
    used_ += size;
    if (tail_ == capacity_) tail_ = 0;
    ++packets_;
  }

  [[nodiscard]] bool empty() const { return packets_ == 0; }
  [[nodiscard]] std::size_t packets() const { return packets_; }
  [[nodiscard]] std::size_t used_bytes() const { return used_; }
  [[nodiscard]] std::size_t capacity_bytes() const { return capacity_; }
  [[nodiscard]] std::size_t max_packet() const { return max_packet_; }

  /// Delivery time of the oldest packet; the ring must not be empty.
  [[nodiscard]] nanoseconds front_time() {
    skip_wrap_marker();
    return read_header(head_).deliver_at;
  }
  /// The oldest packet; the ring must not be empty.
  [[nodiscard]] std::span<const std::byte> front() {
    skip_wrap_marker();
    const header h = read_header(head_);
    return {buffer_.get() + head_ + header_size, h.length};
  }
  /// Removes the oldest packet; the ring must not be empty.
  void pop() {
    skip_wrap_marker();
    const std::size_t size = record_size(read_header(head_).length);
    head_ += size;
    used_ -= size;
    if (head_ == capacity_) head_ = 0;
    if (--packets_ == 0)
      head_ = tail_ = used_ = 0;  // empty: start over, the most room in one piece
  }

 private:
  struct header {
    nanoseconds deliver_at;
    std::uint32_t length;
  };
  static constexpr std::size_t header_size = 16;
  static constexpr std::uint32_t wrap_marker = 0xffffffffu;

  static constexpr std::size_t round_up(std::size_t n) { return (n + 15) / 16 * 16; }
  static constexpr std::size_t record_size(std::size_t length) {
    return header_size + round_up(length);
  }

  void write_header(std::size_t at, header h) {
    std::memcpy(buffer_.get() + at, &h.deliver_at, sizeof h.deliver_at);
    std::memcpy(buffer_.get() + at + 8, &h.length, sizeof h.length);
  }
  [[nodiscard]] header read_header(std::size_t at) const {
    header h{};
    std::memcpy(&h.deliver_at, buffer_.get() + at, sizeof h.deliver_at);
    std::memcpy(&h.length, buffer_.get() + at + 8, sizeof h.length);
    return h;
  }
  void skip_wrap_marker() {
    if (read_header(head_).length == wrap_marker) {
      used_ -= capacity_ - head_;
      head_ = 0;
    }
  }

  std::size_t capacity_;
  std::size_t max_packet_;
  std::unique_ptr<std::byte[]> buffer_;
  std::size_t head_ = 0;  // oldest record
  std::size_t tail_ = 0;  // where the next record goes
  std::size_t used_ = 0;  // bytes between head and tail, wrap filler included
  std::size_t packets_ = 0;
  std::size_t prepared_at_ = 0;
  bool wrap_pending_ = false;
};

/// One direction of the link: decides each packet's fate and delivery time, and holds the
/// packets until then.
class link_direction {
 public:
  /// The delay line holds what the link can have in flight (rate x delay) plus a full queue,
  /// twice over for the record headers of small packets; an unlimited rate gets
  /// `unlimited_ring_bytes`.
  link_direction(const link_params& params, std::size_t max_packet,
                 std::size_t unlimited_ring_bytes = std::size_t{64} << 20)
      : params_(params),
        ring_(ring_bytes(params, unlimited_ring_bytes), max_packet),
        random_(params.seed),
        ns_per_byte_(params.rate_bps > 0 ? 8e9 / params.rate_bps : 0) {
    if (params.loss < 0 || params.loss > 1) throw std::invalid_argument("loss must be in [0, 1]");
  }

  /// Where to read the next packet into (at most max_packet() bytes), or nullptr when the delay
  /// line is full (the packet must then be read elsewhere and passed to drop_full()).
  std::byte* prepare() { return ring_.prepare(); }

  /// The packet of `length` bytes written at prepare()'s pointer arrived at `now`: accept it into
  /// the delay line or drop it. Returns whether it was accepted.
  bool arrive(std::size_t length, nanoseconds now) {
    ++counters_.packets_in;
    counters_.bytes_in += length;
    // 53 random bits as a double in [0, 1): the same seed drops the same packets everywhere.
    if (params_.loss > 0 && static_cast<double>(random_() >> 11) * 0x1.0p-53 < params_.loss) {
      ++counters_.dropped_loss;
      return false;
    }
    nanoseconds deliver_at = now + params_.delay_ns;
    if (ns_per_byte_ > 0) {
      const double start = std::max(static_cast<double>(now), link_free_at_);
      const double backlog_bytes = (start - static_cast<double>(now)) / ns_per_byte_;
      if (backlog_bytes + static_cast<double>(length) > static_cast<double>(params_.queue_bytes) &&
          backlog_bytes > 0) {  // an idle link always takes one packet, whatever the limit
        ++counters_.dropped_queue;
        return false;
      }
      counters_.max_queue_bytes =
          std::max(counters_.max_queue_bytes, static_cast<std::uint64_t>(backlog_bytes));
      link_free_at_ = start + static_cast<double>(length) * ns_per_byte_;
      // Delivered once its last bit is through the bottleneck; ceil: never early.
      deliver_at = static_cast<nanoseconds>(link_free_at_ + 0.999) + params_.delay_ns;
    }
    ring_.commit(length, deliver_at);
    return true;
  }

  /// Counts a packet that arrived while the delay line was full.
  void drop_full(std::size_t length) {
    ++counters_.packets_in;
    counters_.bytes_in += length;
    ++counters_.dropped_ring;
  }

  [[nodiscard]] bool has_packets() const { return !ring_.empty(); }
  /// Delivery time of the next packet; has_packets() must hold.
  [[nodiscard]] nanoseconds next_delivery() { return ring_.front_time(); }
  /// The next packet; has_packets() must hold.
  [[nodiscard]] std::span<const std::byte> next_packet() { return ring_.front(); }
  /// Removes the next packet, counted as delivered.
  void delivered() {
    ++counters_.packets_out;
    counters_.bytes_out += ring_.front().size();
    ring_.pop();
  }

  [[nodiscard]] const link_counters& counters() const { return counters_; }
  [[nodiscard]] const link_params& params() const { return params_; }
  [[nodiscard]] const delay_ring& ring() const { return ring_; }

  static std::size_t ring_bytes(const link_params& p, std::size_t unlimited) {
    if (p.rate_bps <= 0) return unlimited;
    const double in_flight = p.rate_bps / 8 * static_cast<double>(p.delay_ns) / 1e9;
    return 2 * (static_cast<std::size_t>(in_flight) + p.queue_bytes) + (std::size_t{1} << 20);
  }

 private:
  link_params params_;
  delay_ring ring_;
  std::mt19937_64 random_;
  double ns_per_byte_;
  double link_free_at_ = 0;  // when the bottleneck has sent every accepted packet
  link_counters counters_;
};

}  // namespace wanemu
