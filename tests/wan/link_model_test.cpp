// SPDX-License-Identifier: MIT
//
// The link model of wanemu (tools/wanemu/link_model.hpp) alone, on a made-up clock: delivery
// times (delay plus serialisation), tail drop at the queue limit, the loss process and its
// seed, and the delay line's ring (wrap-around, full, packets of mixed sizes).

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "link_model.hpp"

using wanemu::delay_ring;
using wanemu::link_direction;
using wanemu::link_params;
using wanemu::nanoseconds;

namespace {

constexpr nanoseconds ms = 1'000'000;

/// Offers a packet of `length` bytes whose bytes are all `fill`; returns whether it was accepted.
bool offer(link_direction& link, std::size_t length, nanoseconds now, unsigned char fill = 0) {
  std::byte* slot = link.prepare();
  REQUIRE(slot != nullptr);
  std::memset(slot, fill, length);
  return link.arrive(length, now);
}

}  // namespace

TEST_CASE("an unlimited link delivers after exactly the delay", "[wan][link_model]") {
  link_direction link(link_params{.delay_ns = 20 * ms}, 1500);
  REQUIRE(offer(link, 100, 5 * ms, 1));
  REQUIRE(offer(link, 1500, 6 * ms, 2));
  REQUIRE(link.has_packets());
  CHECK(link.next_delivery() == 25 * ms);
  CHECK(link.next_packet().size() == 100);
  CHECK(link.next_packet()[99] == std::byte{1});
  link.delivered();
  CHECK(link.next_delivery() == 26 * ms);
  CHECK(link.next_packet().size() == 1500);
  CHECK(link.next_packet()[0] == std::byte{2});
  link.delivered();
  CHECK_FALSE(link.has_packets());
  CHECK(link.counters().packets_out == 2);
  CHECK(link.counters().bytes_out == 1600);
}

TEST_CASE("the bottleneck serialises packets at the link rate", "[wan][link_model]") {
  // 8 Mbit/s: one byte per microsecond; a 1000-byte packet takes 1 ms to send.
  link_direction link(link_params{.delay_ns = 10 * ms, .rate_bps = 8e6, .queue_bytes = 100'000},
                      1500);
  for (int i = 0; i < 5; ++i) REQUIRE(offer(link, 1000, 0));  // a burst at t = 0
  for (int i = 1; i <= 5; ++i) {
    CHECK(link.next_delivery() == i * ms + 10 * ms);
    link.delivered();
  }
  // An idle link again: a packet arriving later waits for nothing but its own serialisation.
  REQUIRE(offer(link, 500, 100 * ms));
  CHECK(link.next_delivery() == 100 * ms + ms / 2 + 10 * ms);
  CHECK(link.counters().max_queue_bytes == 4000);
}

TEST_CASE("a full queue drops the tail", "[wan][link_model]") {
  link_direction link(link_params{.delay_ns = ms, .rate_bps = 8e6, .queue_bytes = 3000}, 1500);
  // A burst at t = 0: the backlog (the bytes not yet sent, the packet on the wire included) may
  // not exceed 3000 bytes, so packets 1 to 3 are taken and 4 to 6 dropped.
  int accepted = 0;
  for (int i = 0; i < 6; ++i) accepted += offer(link, 1000, 0) ? 1 : 0;
  CHECK(accepted == 3);
  CHECK(link.counters().dropped_queue == 3);
  // Once the backlog drains, packets are accepted again.
  CHECK(offer(link, 1000, 3 * ms));
  CHECK(link.counters().packets_in == 7);
}

TEST_CASE("random loss follows its probability and its seed", "[wan][link_model]") {
  auto drops = [](double loss, std::uint64_t seed) {
    link_direction link(link_params{.delay_ns = 0, .loss = loss, .seed = seed}, 1500);
    std::vector<int> dropped;
    for (int i = 0; i < 20000; ++i) {
      if (!offer(link, 64, i)) dropped.push_back(i);
      while (link.has_packets()) link.delivered();
    }
    return dropped;
  };
  const auto a = drops(0.01, 42);
  CHECK(a.size() >= 150);  // 200 expected; the binomial's sd is 14
  CHECK(a.size() <= 250);
  CHECK(drops(0.01, 42) == a);  // reproducible
  CHECK(drops(0.01, 43) != a);
  CHECK(drops(0, 42).empty());
  CHECK(drops(1, 42).size() == 20000);
  CHECK_THROWS(link_direction(link_params{.loss = 1.5}, 1500));
}

TEST_CASE("the delay line's ring wraps, fills and keeps packets whole", "[wan][link_model]") {
  delay_ring ring(4096, 1000);  // room for about four packets of the largest size
  std::deque<std::vector<std::byte>> expected;
  std::uint8_t next_fill = 0;
  int accepted = 0, refused = 0;
  // Pushes (two times in three) and pops in a fixed pseudo-random order, packets of mixed sizes:
  // the ring wraps many times and fills up; every packet comes out whole and in order.
  std::uint32_t random = 1;
  for (int step = 0; step < 5000; ++step) {
    random = random * 1664525u + 1013904223u;
    if ((random >> 16) % 3 != 0) {
      const std::size_t length = 1 + (random >> 8) % 1000;
      if (std::byte* slot = ring.prepare()) {
        std::vector<std::byte> packet(length);
        for (auto& b : packet) b = static_cast<std::byte>(next_fill++);
        std::memcpy(slot, packet.data(), length);
        ring.commit(length, step);
        expected.push_back(std::move(packet));
        ++accepted;
      } else {
        ++refused;
        REQUIRE(ring.packets() >= 2);  // a refusal only when the ring really holds something
      }
    } else if (!ring.empty()) {
      REQUIRE(ring.front_time() <= step);
      const auto out = ring.front();
      REQUIRE(out.size() == expected.front().size());
      REQUIRE(std::memcmp(out.data(), expected.front().data(), out.size()) == 0);
      ring.pop();
      expected.pop_front();
    }
    REQUIRE(ring.packets() == expected.size());
    REQUIRE(ring.used_bytes() <= ring.capacity_bytes());
  }
  CHECK(accepted > 1000);
  CHECK(refused > 100);  // the ring did fill up, many times
  while (!ring.empty()) {
    REQUIRE(ring.front().size() == expected.front().size());
    ring.pop();
    expected.pop_front();
  }
  CHECK(expected.empty());
  CHECK(ring.used_bytes() == 0);
}

TEST_CASE("a link whose delay line is full counts the drop", "[wan][link_model]") {
  link_direction link(link_params{.delay_ns = ms}, 1500, 8192);
  int accepted = 0;
  for (int i = 0; i < 10; ++i) {
    if (std::byte* slot = link.prepare()) {
      std::memset(slot, 0, 1500);
      accepted += link.arrive(1500, 0) ? 1 : 0;
    } else {
      link.drop_full(1500);
    }
  }
  CHECK(accepted == 5);  // five 1520-byte records fit in 8192 bytes
  CHECK(link.counters().dropped_ring == static_cast<std::uint64_t>(10 - accepted));
  CHECK(link.counters().packets_in == 10);
}
