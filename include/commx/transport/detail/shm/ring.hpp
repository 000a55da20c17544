// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A lock-free single-producer/single-consumer byte ring in shared memory: one per ordered pair
/// of ranks, cut into 32-byte cells. A record (a header, then `payload` bytes) starts on a cell
/// and takes whole cells; it may wrap past the buffer's end (its payload is then copied in two
/// pieces). An eager message's header is 24 bytes, so a message of up to 8 bytes takes one
/// cell, two to a cache line, as in Open MPI's fast boxes: a stream of them moves half the lines
/// one cell per line would. The other records' 56-byte headers start on a cache line (a skip
/// record fills the cell before when needed), so no header crosses the buffer's end. Positions
/// are byte counts that only grow (64 bits do not wrap in any job's life).
///
/// The consumer learns of a record from the record itself, as Open MPI's vader fast boxes do:
/// the header's first word, its stamp, is stored last (release) and holds the record's
/// position + 1. The consumer polls the stamp of the cell at its position (acquire), so an
/// 8-byte message crosses between cores within one cache line, not as a tail word and then the
/// data. A cell that held payload in an earlier lap could hold any bytes where the next stamp
/// goes: the producer remembers which cells hold payload, zeroes the stamp word of the cell
/// after a record before it publishes the record if that cell is one of them, and always keeps
/// that cell free (one cell of slack; after a record that started over at the buffer's start,
/// that cell may be the skip record the consumer has yet to pass, which holds no payload and
/// is never zeroed). So the consumer only ever sees zero, a stamp of an
/// earlier lap (a smaller position) or the true stamp there, and a stream of small messages
/// touches each cell once per lap. The consumer owns `head` (its own cache line), which the
/// producer reads only when the room it remembers is not enough. No lock, no system call:
/// waking a sleeping consumer is the endpoint's business.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace commx::detail::shm {

inline constexpr std::size_t cache_line = 64;

/// The shared part of a ring besides its cells: the consumer's position, on a line of its own.
struct ring_control {
  alignas(cache_line) std::atomic<std::uint64_t> head{0};  ///< written by the consumer only
  /// Written by the consumer only: the eager credit it has given back so far (credit.hpp).
  std::atomic<std::uint64_t> returned{0};
};
static_assert(sizeof(ring_control) == cache_line);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);

/// What a record is for.
enum class record_kind : std::uint8_t {
  eager = 1,  ///< a whole message, payload inline
  rts,        ///< ready to send: a large message's envelope; the payload stays with the sender
  cts,        ///< clear to send: the receiver matched an rts and wants it through the ring
  data,       ///< a piece of a large message going through the ring after a cts
  fin,        ///< the receiver copied a large message itself (cross-memory attach): done
  revoke,     ///< the sender withdrew an offer that had no ticket slot (transfer_table.hpp)
  skip,       ///< nothing: fills the cell before a long header's cache line (never surfaces)
};

/// The largest payload a record can say it carries. A record fits in its ring, so rings are at
/// most 16 MiB (transport/shm.hpp refuses larger ones).
inline constexpr std::size_t max_record_payload = (std::size_t{1} << 24) - 1;

/// Every record's header. Eager and skip records carry only its first 24 bytes
/// (`short_header`); the others carry all 56.
struct record {
  std::uint64_t stamp = 0;  ///< the record's position + 1, stored last (see the file comment)
  record_kind kind : 8 = record_kind{};
  std::uint32_t payload : 24 = 0;  ///< bytes that follow the header in the ring
  std::int32_t tag = 0;
  std::uint64_t ctx = 0;
  // The long header only:
  std::uint32_t ticket = 0;      ///< rts, cts, data, fin: the sender's ticket slot, or no_ticket
  std::uint32_t unused = 0;      // explicit padding: headers are copied as bytes
  std::uint64_t generation = 0;  ///< rts, cts, data, fin, revoke: which offer of the pair
  std::uint64_t size = 0;        ///< rts: the message's size; data: the offset of this piece
  std::uint64_t address = 0;     ///< rts: where the message is in the sender's memory
};
static_assert(sizeof(record) == 56 && offsetof(record, tag) == 12 &&
              offsetof(record, ticket) == 24);

inline constexpr std::size_t cell = 32;
inline constexpr std::size_t short_header = offsetof(record, ticket);
static_assert(cache_line % cell == 0 && sizeof(record) <= cache_line);

/// Whether a record of `kind` carries the short header (and may start on any cell).
constexpr bool is_short(record_kind kind) {
  return kind == record_kind::eager || kind == record_kind::skip;
}

/// The header bytes a record of `kind` carries; its payload follows them.
constexpr std::size_t header_bytes(record_kind kind) {
  return is_short(kind) ? short_header : sizeof(record);
}

/// The space one record takes in a ring: whole cells.
constexpr std::size_t record_bytes(record_kind kind, std::size_t payload) {
  return (header_bytes(kind) + payload + cell - 1) & ~(cell - 1);
}

/// Copies `n` <= 32 bytes with a few fixed-size moves rather than a call to memcpy: a small
/// message's header and payload are written and read this way, within one cell.
// GCC 12 at -O3, inlining this into a caller with a short buffer of known size (or of a size
// it cannot bound), warns of `to + n - 16` on paths its range analysis cannot rule out but the
// branches do (n >= 16).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
inline void copy_small(std::byte* to, const std::byte* from, std::size_t n) {
  if (n >= 16) {
    std::memcpy(to, from, 16);
    std::memcpy(to + n - 16, from + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(to, from, 8);
    std::memcpy(to + n - 8, from + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(to, from, 4);
    std::memcpy(to + n - 4, from + n - 4, 4);
  } else {
    for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// Copies in and out of a ring's buffer, across its end when needed.
class ring_buffer {
 public:
  ring_buffer() = default;
  ring_buffer(ring_control* control, std::byte* data, std::size_t capacity)
      : control_(control), data_(data), mask_(capacity - 1) {}

  [[nodiscard]] ring_control& control() const { return *control_; }
  [[nodiscard]] std::size_t capacity() const { return mask_ + 1; }

  void put(std::uint64_t position, const void* from, std::size_t bytes) const {
    if (bytes == 0) return;  // `from` may be null then, which memcpy must never see
    const std::size_t at = position & mask_;
    const std::size_t first = std::min(bytes, capacity() - at);
    const auto* source = static_cast<const std::byte*>(from);
    std::memcpy(data_ + at, source, first);
    if (first < bytes) std::memcpy(data_, source + first, bytes - first);
  }

  /// The cell at `position` (which must start a cell): a record's header and a one-cell
  /// record's payload never cross the buffer's end there.
  [[nodiscard]] std::byte* cell_at(std::uint64_t position) const {
    return data_ + (position & mask_);
  }

  /// The stamp word of the cell at `position` (which must start a cell).
  [[nodiscard]] std::atomic_ref<std::uint64_t> stamp(std::uint64_t position) const {
    return std::atomic_ref<std::uint64_t>(
        *std::launder(reinterpret_cast<std::uint64_t*>(cell_at(position))));
  }

  /// Has the kernel back the buffer's bytes [`from`, `to`) (offsets), never written before,
  /// with pages in one call rather than a fault per page as the copy reaches them: a write
  /// fault cost 12-16 us a page on this project's VM, the call 1.2-1.8 and the first write
  /// after it 6-7. Only for two pages or more; a kernel without MADV_POPULATE_WRITE (before
  /// Linux 5.14) refuses it, and the copy then faults as before (a C library without it, before
  /// glibc 2.35, leaves the call out).
  void populate(std::size_t from, std::size_t to) const {
#ifdef MADV_POPULATE_WRITE
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto start = (reinterpret_cast<std::uintptr_t>(data_ + from) + page - 1) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(data_ + to) & ~(page - 1);  // not beyond
    if (end < start + 2 * page) return;
    (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
#else
    (void)from;
    (void)to;
#endif
  }

  void get(std::uint64_t position, void* to, std::size_t bytes) const {
    if (bytes == 0) return;
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
      : ring_(ring),
        head_(ring.control().head.load(std::memory_order_acquire)),
        tail_(head_),
        payload_cells_(ring.capacity() / cell, false) {}

  /// Whether a record of `kind` with `payload` bytes fits now (with the cell of slack, and the
  /// skip cell a long header may need).
  bool fits(record_kind kind, std::size_t payload) {
    const std::size_t need = skip_before(kind) + record_bytes(kind, payload) + cell;
    if (tail_ + need - head_ <= ring_.capacity()) return true;
    head_ = ring_.control().head.load(std::memory_order_acquire);
    return tail_ + need - head_ <= ring_.capacity();
  }

  /// Writes one record and publishes it; the caller checked fits(header.kind, payload.size()).
  void write(const record& header, std::span<const std::byte> payload) {
    if (payload.size() >= start_over_payload) {
      start_over_if_empty(record_bytes(header.kind, payload.size()));
    }
    if (skip_before(header.kind) != 0) {
      record skip;
      skip.kind = record_kind::skip;
      publish(skip, {}, tail_ + cell);
    }
    publish(header, payload, tail_ + record_bytes(header.kind, payload.size()));
  }

  /// Whether the consumer has freed space since we last looked (one load, nothing written).
  [[nodiscard]] bool room_freed() const {
    return ring_.control().head.load(std::memory_order_acquire) != head_;
  }

  /// The eager credit the consumer has given back so far.
  [[nodiscard]] std::uint64_t credit_returned() const {
    return ring_.control().returned.load(std::memory_order_acquire);
  }

 private:
  [[nodiscard]] std::size_t cell_of(std::uint64_t position) const {
    return static_cast<std::size_t>((position & (ring_.capacity() - 1)) / cell);
  }
  // The bytes of skip record a record of `kind` needs first: a long header starts on a line.
  [[nodiscard]] std::size_t skip_before(record_kind kind) const {
    return is_short(kind) ? 0 : static_cast<std::size_t>(tail_ & (cache_line - 1));
  }

  // A record of at least this much payload starts again at the buffer's start when the ring
  // is empty: messages of a page or more then reuse the same few pages, warm in the caches,
  // and a ring's pages beyond what one exchange has in flight are never touched. Going round
  // the whole ring instead costs each sender and receiver a page fault per 4 KiB the first
  // time round (bench/HISTORY.md, 2026-11-29: a 64 KiB allreduce's first 20 calls at 8 ranks
  // took 2.5x its later ones). Reading the consumer's position costs a cache line from its
  // core: nothing beside a page's copy, too much for every small message.
  static constexpr std::size_t start_over_payload = 4096;

  // Skips to the next lap when the record of `bytes` would reach pages never written, the
  // consumer has taken everything, and the record fits before the tail's offset in the buffer
  // (so it is written at once, not after the consumer has passed the skip). Where traffic has
  // filled the ring once, records go round as before: starting over there made a stream of
  // 4 MiB messages at 2 ranks 1.1x slower (the cache lines just read on the other core are
  // written again at once).
  // The record may end right at the skip: the skip's cell is then its cell of slack, which
  // holds no payload (so nothing there is zeroed) and which the consumer leaves as soon as it
  // looks. Without that, the record after one that started over, of the same size, went on
  // to pages never written: a repeated exchange touched two regions of fresh pages, not one
  // (the scale program's third 64 KiB allreduce at 8 ranks took 10-30x its fourth: a page's
  // first touch costs 6-16 us on this project's VM).
  void start_over_if_empty(std::size_t bytes) {
    const std::size_t offset = static_cast<std::size_t>(tail_ & (ring_.capacity() - 1));
    if (offset + bytes <= written_up_to_) return;  // its pages are touched already
    if (offset < bytes) return;                    // near the start already
    head_ = ring_.control().head.load(std::memory_order_acquire);
    if (head_ != tail_) return;
    record skip;
    skip.kind = record_kind::skip;
    skip.payload = static_cast<std::uint32_t>(ring_.capacity() - offset - short_header);
    publish(skip, {}, tail_ + (ring_.capacity() - offset));
  }

  // Writes `header` and `payload` at the tail, publishes them and moves the tail to `next`:
  // past the payload, or past the cells a skip record claims without writing them (their
  // payload_cells_ stay as they were, since what they hold is unchanged).
  void publish(const record& header, std::span<const std::byte> payload, std::uint64_t next) {
    const std::size_t head_bytes = header_bytes(header.kind);
    const std::uint64_t at = tail_;
    const std::uint64_t written = at + record_bytes(header.kind, payload.size());
    const std::size_t end = static_cast<std::size_t>(at & (ring_.capacity() - 1)) + (written - at);
    if (end > written_up_to_ && written_up_to_ < ring_.capacity()) {
      ring_.populate(written_up_to_, std::min(end, ring_.capacity()));
    }
    // Everything but the stamp; then the next cell's stamp cleared if payload of an earlier lap
    // lies there; then this stamp.
    std::byte* line = ring_.cell_at(at);
    const auto* fields = reinterpret_cast<const std::byte*>(&header) + sizeof header.stamp;
    std::memcpy(line + sizeof header.stamp, fields, head_bytes - sizeof header.stamp);
    if (head_bytes + payload.size() <= cell) {
      copy_small(line + head_bytes, payload.data(), payload.size());
    } else {
      ring_.put(at + head_bytes, payload.data(), payload.size());
    }
    for (std::uint64_t p = at + cell; p < written; p += cell) payload_cells_[cell_of(p)] = true;
    written_up_to_ = std::max(written_up_to_, std::min(end, ring_.capacity()));
    if (payload_cells_[cell_of(next)]) {
      ring_.stamp(next).store(0, std::memory_order_relaxed);
      payload_cells_[cell_of(next)] = false;
    }
    payload_cells_[cell_of(at)] = false;
    ring_.stamp(at).store(at + 1, std::memory_order_release);
    tail_ = next;
  }

  ring_buffer ring_;
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
  std::vector<bool> payload_cells_;  // per cell: holds payload of its last lap
  std::size_t written_up_to_ = 0;    // the buffer's bytes below this offset have been written
};

/// The consumer's end: `peek` the next record's header, copy its payload out, then `pop` it.
class ring_consumer {
 public:
  ring_consumer() = default;
  explicit ring_consumer(ring_buffer ring)
      : ring_(ring), head_(ring.control().head.load(std::memory_order_relaxed)) {}

  /// True when a record is waiting; then `header` holds its header. Skip records are popped
  /// here and never seen.
  bool peek(record& header) {
    for (;;) {
      if (!has_data()) return false;
      const std::byte* line = ring_.cell_at(head_);
      auto* fields = reinterpret_cast<std::byte*>(&header);
      std::memcpy(fields + sizeof header.stamp, line + sizeof header.stamp,
                  short_header - sizeof header.stamp);
      if (header.kind == record_kind::skip) {
        pop(header);
        continue;
      }
      if (!is_short(header.kind)) {
        std::memcpy(fields + short_header, line + short_header, sizeof header - short_header);
      }
      header.stamp = head_ + 1;
      return true;
    }
  }

  /// Whether the producer has published something not yet consumed (one load, no copy).
  [[nodiscard]] bool has_data() const {
    return ring_.stamp(head_).load(std::memory_order_acquire) == head_ + 1;
  }

  /// Copies `bytes` of the current record's payload, from `offset`, to `to`.
  void read_payload(const record& header, std::size_t offset, void* to, std::size_t bytes) const {
    const std::size_t from = header_bytes(header.kind) + offset;
    if (from + bytes <= cell) {
      copy_small(static_cast<std::byte*>(to), ring_.cell_at(head_) + from, bytes);
    } else {
      ring_.get(head_ + from, to, bytes);
    }
  }

  /// Gives the producer back eager credit: `total`, the sum so far, only ever grows.
  void return_credit(std::uint64_t total) const {
    ring_.control().returned.store(total, std::memory_order_release);
  }

  /// Releases the current record's space to the producer.
  void pop(const record& header) {
    head_ += record_bytes(header.kind, header.payload);
    ring_.control().head.store(head_, std::memory_order_release);
  }

 private:
  ring_buffer ring_;
  std::uint64_t head_ = 0;
};

}  // namespace commx::detail::shm
