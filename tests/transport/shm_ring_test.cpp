// SPDX-License-Identifier: MIT
// The shared-memory ring's record protocol, in one process: the consumer learns of a record
// from its stamp alone, so nothing the producer ever wrote as payload may look like the next
// record's stamp (ring.hpp).

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "commx/transport/detail/shm/ring.hpp"

namespace shm = commx::detail::shm;

namespace {

// A ring of `Capacity` bytes in ordinary memory, with its producer and consumer ends.
template <std::size_t Capacity>
struct ring_in_memory {
  static constexpr std::size_t capacity = Capacity;
  shm::ring_control control;
  alignas(shm::cache_line) std::array<std::byte, capacity> cells{};
  shm::ring_producer producer{shm::ring_buffer(&control, cells.data(), capacity)};
  shm::ring_consumer consumer{shm::ring_buffer(&control, cells.data(), capacity)};

  // Where in the buffer a record's header was written (its stamp says its position).
  std::size_t offset_of(const shm::record& got) const { return (got.stamp - 1) % capacity; }
};
using test_ring = ring_in_memory<4096>;
// Large enough that records of a page or more start over when the ring is empty.
using large_ring = ring_in_memory<65536>;

shm::record eager(int tag, std::size_t bytes) {
  shm::record header{};
  header.kind = shm::record_kind::eager;
  header.payload = static_cast<std::uint32_t>(bytes);
  header.tag = tag;
  header.ctx = 7;
  return header;
}

// Takes the one record waiting, checks it is `tag` carrying `expected`, and that nothing
// else looks like a record after it.
void take_exactly(test_ring& ring, int tag, std::span<const std::byte> expected) {
  shm::record header{};
  REQUIRE(ring.consumer.peek(header));
  CHECK(header.kind == shm::record_kind::eager);
  CHECK(header.tag == tag);
  CHECK(header.ctx == 7);
  REQUIRE(header.payload == expected.size());
  std::vector<std::byte> got(expected.size());
  ring.consumer.read_payload(header, 0, got.data(), got.size());
  CHECK(std::equal(got.begin(), got.end(), expected.begin(), expected.end()));
  ring.consumer.pop(header);
  CHECK_FALSE(ring.consumer.has_data());
  CHECK_FALSE(ring.consumer.peek(header));
}

}  // namespace

TEST_CASE("payload that holds the next lap's stamps is never taken for a record", "[shm]") {
  auto ring = std::make_unique<test_ring>();
  const std::size_t cell = shm::cell;
  // Each round, one large record whose every cell starts with the stamp a record written at
  // that cell one lap later would carry, then small ones over those very cells: without the
  // producer clearing stale payload, the consumer would read it as records.
  std::uint64_t position = 0;
  for (int round = 0; round < 6; ++round) {
    const std::size_t big = test_ring::capacity / 2;
    std::vector<std::byte> payload(big, std::byte{0x5a});
    const std::uint64_t payload_at = position + shm::short_header;
    for (std::uint64_t at = (payload_at + cell - 1) / cell * cell; at + 8 <= payload_at + big;
         at += cell) {
      const std::uint64_t forged = at + test_ring::capacity + 1;
      std::memcpy(payload.data() + (at - payload_at), &forged, sizeof forged);
    }
    REQUIRE(ring->producer.fits(shm::record_kind::eager, big));
    ring->producer.write(eager(1000 + round, big), payload);
    take_exactly(*ring, 1000 + round, payload);
    position += shm::record_bytes(shm::record_kind::eager, big);
    // Small records of sizes that end on and off cell boundaries, around the whole ring.
    for (std::size_t i = 0; i < 2 * test_ring::capacity / cell; ++i) {
      const std::size_t bytes = (i * 13) % 90;
      std::vector<std::byte> small(bytes, static_cast<std::byte>(i));
      REQUIRE(ring->producer.fits(shm::record_kind::eager, bytes));
      ring->producer.write(eager(static_cast<int>(i), bytes), small);
      take_exactly(*ring, static_cast<int>(i), small);
      position += shm::record_bytes(shm::record_kind::eager, bytes);
    }
  }
}

TEST_CASE("a full ring refuses a record and keeps a cell free", "[shm]") {
  auto ring = std::make_unique<test_ring>();
  const std::size_t per_record = shm::record_bytes(shm::record_kind::eager, 8);
  // An 8-byte message takes half a cache line; one byte more takes a whole one.
  CHECK(per_record == shm::cache_line / 2);
  CHECK(shm::record_bytes(shm::record_kind::eager, 9) == shm::cache_line);
  std::size_t written = 0;
  const std::array<std::byte, 8> payload{};
  while (ring->producer.fits(shm::record_kind::eager, payload.size())) {
    ring->producer.write(eager(static_cast<int>(written), payload.size()), payload);
    ++written;
  }
  // One cell of slack: the cell after the last record is never one the consumer still reads.
  CHECK(written == test_ring::capacity / per_record - 1);
  shm::record header{};
  for (std::size_t i = 0; i < written; ++i) {
    REQUIRE(ring->consumer.peek(header));
    CHECK(header.tag == static_cast<int>(i));
    ring->consumer.pop(header);
  }
  CHECK_FALSE(ring->consumer.peek(header));
  CHECK(ring->producer.fits(shm::record_kind::eager, payload.size()));
}

TEST_CASE("every payload size arrives whole and alone, within one cell and across cells", "[shm]") {
  // Sizes around each of copy_small's cases (0-3, 4-7 and 8 bytes in one cell) and records of
  // two to four cells, lap after lap: neighbouring bytes must stay untouched.
  auto ring = std::make_unique<test_ring>();
  std::uint8_t next = 1;
  for (int lap = 0; lap < 12; ++lap) {
    for (std::size_t size = 0; size <= 100; ++size) {
      std::vector<std::byte> payload(size);
      for (auto& b : payload) b = std::byte{next++};
      REQUIRE(ring->producer.fits(shm::record_kind::eager, size));
      ring->producer.write(eager(static_cast<int>(size), size), payload);
      shm::record header{};
      REQUIRE(ring->consumer.peek(header));
      REQUIRE(header.payload == size);
      CHECK(header.tag == static_cast<int>(size));
      CHECK(header.ctx == 7);
      // Read into the middle of a guarded buffer: a copy that runs over shows in the guards.
      std::vector<std::byte> got(size + 64, std::byte{0xee});
      ring->consumer.read_payload(header, 0, got.data() + 32, size);
      CHECK(std::equal(payload.begin(), payload.end(), got.begin() + 32));
      CHECK(std::all_of(got.begin(), got.begin() + 32,
                        [](std::byte b) { return b == std::byte{0xee}; }));
      CHECK(std::all_of(got.begin() + 32 + static_cast<std::ptrdiff_t>(size), got.end(),
                        [](std::byte b) { return b == std::byte{0xee}; }));
      ring->consumer.pop(header);
      CHECK_FALSE(ring->consumer.has_data());
    }
  }
}

TEST_CASE("long headers start on a cache line, after skips the consumer never sees", "[shm]") {
  // Eager records of one cell and long ones (an offer, and a piece with payload) in turn,
  // lap after lap: every long header must start on a line, so none crosses the ring's end,
  // and the consumer must see exactly what was written, in order, skips never among it.
  auto ring = std::make_unique<test_ring>();
  std::uint64_t skipped = 0;
  std::uint64_t position = 0;
  for (int i = 0; i < 600; ++i) {
    shm::record header{};
    std::vector<std::byte> payload;
    if (i % 3 == 0) {
      header = eager(i, 5);
      payload.assign(5, std::byte{0x11});
    } else {
      header.kind = i % 3 == 1 ? shm::record_kind::rts : shm::record_kind::data;
      header.tag = i;
      header.ctx = 7;
      header.ticket = static_cast<std::uint32_t>(i) * 3U;
      header.generation = 0x1234567890abcdefULL + static_cast<std::uint64_t>(i);
      header.size = static_cast<std::uint64_t>(i) * 100U;
      header.address = ~static_cast<std::uint64_t>(i);
      payload.assign(header.kind == shm::record_kind::data ? 40U : 0U, static_cast<std::byte>(i));
      header.payload = static_cast<std::uint32_t>(payload.size());
    }
    REQUIRE(ring->producer.fits(header.kind, payload.size()));
    ring->producer.write(header, payload);
    shm::record got{};
    REQUIRE(ring->consumer.peek(got));
    const std::uint64_t at = got.stamp - 1;
    CHECK(at >= position);
    skipped += at - position;
    REQUIRE(got.kind == header.kind);
    CHECK(got.tag == i);
    CHECK(got.ctx == 7);
    REQUIRE(got.payload == payload.size());
    if (got.kind != shm::record_kind::eager) {
      CHECK(at % shm::cache_line == 0);
      CHECK(got.ticket == header.ticket);
      CHECK(got.generation == header.generation);
      CHECK(got.size == header.size);
      CHECK(got.address == header.address);
    }
    std::vector<std::byte> bytes(payload.size());
    ring->consumer.read_payload(got, 0, bytes.data(), bytes.size());
    CHECK(bytes == payload);
    ring->consumer.pop(got);
    position = at + shm::record_bytes(got.kind, got.payload);
    CHECK_FALSE(ring->consumer.peek(got));
  }
  // Eager records of one cell leave every other long record off a line: skips were written.
  CHECK(skipped > 0);
}

namespace {

std::vector<std::byte> filled(std::size_t bytes, int seed) {
  std::vector<std::byte> payload(bytes);
  for (std::size_t i = 0; i < bytes; ++i) payload[i] = static_cast<std::byte>(i * 7 + seed);
  return payload;
}

// Writes a record of `page` bytes filled from `tag` (it must fit).
void put_page(large_ring& ring, int tag, std::size_t page) {
  REQUIRE(ring.producer.fits(shm::record_kind::eager, page));
  ring.producer.write(eager(tag, page), filled(page, tag));
}

// Takes the next record, checks it is `tag`'s page whole, and says where in the buffer it was.
std::size_t take_page(large_ring& ring, int tag, std::size_t page) {
  shm::record got{};
  REQUIRE(ring.consumer.peek(got));
  CHECK(got.tag == tag);
  REQUIRE(got.payload == page);
  std::vector<std::byte> bytes(page);
  ring.consumer.read_payload(got, 0, bytes.data(), bytes.size());
  CHECK(bytes == filled(page, tag));
  const std::size_t offset = ring.offset_of(got);
  ring.consumer.pop(got);
  return offset;
}

}  // namespace

TEST_CASE("a page-sized record starts over at the buffer's start once the ring is empty", "[shm]") {
  auto ring = std::make_unique<large_ring>();
  const std::size_t page = 8192;
  const std::size_t span = shm::record_bytes(shm::record_kind::eager, page);
  std::vector<std::size_t> offsets;
  auto take = [&](int tag) { offsets.push_back(take_page(*ring, tag, page)); };
  auto put = [&](int tag) { put_page(*ring, tag, page); };
  // Three records nobody takes in between: each follows the last, the ring is never empty.
  for (int tag = 0; tag < 3; ++tag) put(tag);
  for (int tag = 0; tag < 3; ++tag) take(tag);
  CHECK(offsets == std::vector<std::size_t>{0, span, 2 * span});
  // Now the ring is empty and the tail far from the start: the next one goes to the start.
  put(3);
  take(3);
  CHECK(offsets.back() == 0);
  // Right after the start there is no point going back (it would not save a page).
  put(4);
  take(4);
  CHECK(offsets.back() == span);
  // A small record never starts over; nor does a page-sized one after it whose pages were
  // written before (going round there keeps the other core's cache lines out of the way).
  const std::array<std::byte, 8> small{};
  REQUIRE(ring->producer.fits(shm::record_kind::eager, small.size()));
  ring->producer.write(eager(99, small.size()), small);
  shm::record got{};
  REQUIRE(ring->consumer.peek(got));
  CHECK(ring->offset_of(got) == 2 * span);
  ring->consumer.pop(got);
  put(5);
  take(5);
  CHECK(offsets.back() == 2 * span + shm::cell);
  // The next would reach pages never written: it starts over.
  put(6);
  take(6);
  CHECK(offsets.back() == 0);
  CHECK_FALSE(ring->consumer.peek(got));
}

TEST_CASE("a repeated page-sized record stays on the pages it has written", "[shm]") {
  // A small record first, as a job's small messages come before its large ones: the first
  // page-sized record goes after it, the second starts over, and the third, which would end
  // where the first did, starts over too, ending right at its skip (the skip's cell is its
  // cell of slack) rather than going on to pages never written.
  auto ring = std::make_unique<large_ring>();
  const std::size_t page = 8192;
  const std::size_t span = shm::record_bytes(shm::record_kind::eager, page);
  const std::array<std::byte, 8> small{};
  REQUIRE(ring->producer.fits(shm::record_kind::eager, small.size()));
  ring->producer.write(eager(99, small.size()), small);
  shm::record got{};
  REQUIRE(ring->consumer.peek(got));
  ring->consumer.pop(got);
  std::vector<std::size_t> offsets;
  for (int tag = 0; tag < 5; ++tag) {
    put_page(*ring, tag, page);
    if (tag == 2) {
      // Tail and head are a whole ring apart until the consumer passes the skip: nothing else
      // fits, not even the smallest record.
      CHECK_FALSE(ring->producer.fits(shm::record_kind::eager, 0));
    }
    offsets.push_back(take_page(*ring, tag, page));
    CHECK_FALSE(ring->consumer.peek(got));
  }
  CHECK(offsets == std::vector<std::size_t>{shm::cell, 0, 0, 0, 0});
  // After the last, a small record follows it, where the skip was: seen once, whole.
  REQUIRE(ring->producer.fits(shm::record_kind::eager, small.size()));
  ring->producer.write(eager(100, small.size()), small);
  REQUIRE(ring->consumer.peek(got));
  CHECK(got.tag == 100);
  CHECK(ring->offset_of(got) == span);
  ring->consumer.pop(got);
  CHECK_FALSE(ring->consumer.peek(got));
}

TEST_CASE("records of every size, taken at random moments, arrive whole and in order", "[shm]") {
  // Starting over, skips before long headers, records across the buffer's end and full rings,
  // all mixed: the consumer sees exactly the records written, nothing else.
  auto ring = std::make_unique<large_ring>();
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next_random = [&state](std::uint64_t bound) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state % bound;
  };
  std::vector<std::pair<int, std::size_t>> in_flight;  // tag, payload bytes
  int written = 0;
  int taken = 0;
  std::size_t started_over = 0;  // records after a jump longer than a skip before a header
  std::uint64_t expected_at = 0;
  // The buffer's bytes below this offset written so far, as the producer counts them (from the
  // records in order; a skip's cell too).
  std::size_t written_up_to = 0;
  const auto written_to = [&](std::size_t offset, std::size_t bytes) {
    written_up_to = std::max(written_up_to, std::min(offset + bytes, large_ring::capacity));
  };
  bool draining = false;  // now and then the consumer takes everything, so the ring empties
  while (taken < 3000) {
    if (!draining && next_random(40) == 0) draining = true;
    if (!draining && written < 3000 && next_random(3) != 0) {
      const std::size_t bytes =
          next_random(4) == 0 ? next_random(20000) : next_random(100);  // some of a page or more
      shm::record header = eager(written, bytes);
      if (next_random(4) == 0) header.kind = shm::record_kind::data;  // a long header
      if (!ring->producer.fits(header.kind, bytes)) continue;
      ring->producer.write(header, filled(bytes, written));
      in_flight.emplace_back(written++, bytes);
      continue;
    }
    shm::record got{};
    if (!ring->consumer.peek(got)) {
      REQUIRE(in_flight.empty());
      draining = false;
      continue;
    }
    REQUIRE_FALSE(in_flight.empty());
    REQUIRE(got.tag == in_flight.front().first);
    REQUIRE(got.payload == in_flight.front().second);
    std::vector<std::byte> bytes(got.payload);
    ring->consumer.read_payload(got, 0, bytes.data(), bytes.size());
    REQUIRE(bytes == filled(got.payload, got.tag));
    const std::size_t span = shm::record_bytes(got.kind, got.payload);
    if (got.stamp - 1 > expected_at + shm::cache_line) {
      // Only a record that would have reached bytes never written starts over, and only from
      // far enough into the buffer that it fits before where it would have gone.
      const auto from = static_cast<std::size_t>(expected_at % large_ring::capacity);
      CHECK(from + span > written_up_to);
      CHECK(from >= span);
      CHECK(ring->offset_of(got) == 0);
      written_to(from, shm::cell);  // the skip
      ++started_over;
    }
    written_to(ring->offset_of(got), span);
    expected_at = got.stamp - 1 + span;
    ring->consumer.pop(got);
    in_flight.erase(in_flight.begin());
    ++taken;
  }
  CHECK(started_over > 0);
  CHECK(written_up_to == large_ring::capacity);  // records went round the whole buffer too
}
