// SPDX-License-Identifier: MIT
// shm's queue of unexpected messages (matching.hpp), in one process: it reuses its slots and
// its emptied keys, so what it must keep through that reuse is tested here: first in, first
// out per key, the earliest arrival for a wildcard, removal in the middle of a backlog, and
// the memory it keeps.

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "commx/transport/detail/shm/matching.hpp"

namespace shm = commx::detail::shm;

namespace {

constexpr commx::context_id ctx = 7;

void push(shm::unexpected_queue& queue, int source, int tag, std::uint32_t value,
          std::size_t bytes = sizeof(std::uint32_t)) {
  std::byte* payload = queue.push_eager(source, ctx, tag, bytes);
  std::memcpy(payload, &value, sizeof value);
}

// Takes the first message a receive (source, tag) matches; returns its value.
std::uint32_t take(shm::unexpected_queue& queue, int source, int tag) {
  const auto at = queue.find(source, ctx, tag);
  REQUIRE(at != queue.end());
  std::uint32_t value = 0;
  std::memcpy(&value, at->eager.data(), sizeof value);
  queue.pop(at);
  return value;
}

}  // namespace

TEST_CASE("a key's messages come out in arrival order while its slots are reused") {
  shm::unexpected_queue queue;
  std::uint32_t next_in = 0;
  std::uint32_t next_out = 0;
  // A backlog of 5 that never drains: the slots move to the front now and then.
  for (int i = 0; i < 5; ++i) push(queue, 1, 3, next_in++);
  for (int i = 0; i < 1000; ++i) {
    push(queue, 1, 3, next_in++);
    if (i % 7 == 0) push(queue, 1, 3, next_in++);
    REQUIRE(take(queue, 1, 3) == next_out++);
    if (i % 7 == 3) REQUIRE(take(queue, 1, 3) == next_out++);
  }
  while (next_out < next_in) REQUIRE(take(queue, 1, 3) == next_out++);
  CHECK(queue.find(1, ctx, 3) == queue.end());
  CHECK(queue.find(commx::any_source, ctx, commx::any_tag) == queue.end());
}

TEST_CASE("a wildcard receive takes the earliest arrival among the keys") {
  shm::unexpected_queue queue;
  for (std::uint32_t i = 0; i < 60; ++i) push(queue, 1 + static_cast<int>(i % 3), 3, i);
  for (std::uint32_t i = 0; i < 60; ++i) REQUIRE(take(queue, commx::any_source, 3) == i);
  // Emptied keys leave the index; a new key reuses one of their nodes.
  push(queue, 2, 4, 99);
  CHECK(take(queue, commx::any_source, commx::any_tag) == 99);
  CHECK(queue.find(commx::any_source, ctx, commx::any_tag) == queue.end());
}

TEST_CASE("removal from the middle of a backlog keeps the rest in order") {
  shm::unexpected_queue queue;
  for (std::uint32_t i = 0; i < 10; ++i) push(queue, 1, 3, i);
  for (std::uint32_t i = 0; i < 3; ++i) REQUIRE(take(queue, 1, 3) == i);
  queue.remove_if([](const shm::queued_message& m) {
    std::uint32_t value = 0;
    std::memcpy(&value, m.eager.data(), sizeof value);
    return value % 2 == 1;
  });
  push(queue, 1, 3, 10);
  for (const std::uint32_t expected : {4U, 6U, 8U, 10U}) REQUIRE(take(queue, 1, 3) == expected);
  CHECK(queue.find(1, ctx, 3) == queue.end());
}

TEST_CASE("the queue keeps small payloads' memory, across keys too") {
  shm::unexpected_queue queue;
  push(queue, 1, 3, 1, 100);
  (void)take(queue, 1, 3);
  CHECK(queue.keys() == 0);
  // A new key (a collective's next call) gets the emptied key's node, slots and payload memory.
  push(queue, 1, 4, 2);
  CHECK(queue.find(1, ctx, 4)->eager.capacity() >= 100);
  (void)take(queue, 1, 4);
  push(queue, 1, 3, 3, 4 * commx::detail::kept_payload);
  (void)take(queue, 1, 3);
  push(queue, 1, 3, 4);
  CHECK(queue.find(1, ctx, 3)->eager.capacity() <= commx::detail::kept_payload);
  (void)take(queue, 1, 3);
  for (int tag = 0; tag < 1000; ++tag) {
    push(queue, 1, tag, static_cast<std::uint32_t>(tag));
    REQUIRE(take(queue, 1, tag) == static_cast<std::uint32_t>(tag));
  }
  CHECK(queue.keys() == 0);
}

TEST_CASE("keys leave the index in any order and every other key is still found") {
  // Collectives' tags: calls 256 apart, a few kinds each. Enough keys to grow the table several
  // times; taken out in a scrambled order, so keys leave from the middle of probe runs and the
  // keys after them move back.
  shm::unexpected_queue queue;
  std::vector<int> tags;
  for (int call = 0; call < 300; ++call) {
    for (const int kind : {3, 17}) tags.push_back(call * 256 + kind);
  }
  for (std::size_t i = 0; i < tags.size(); ++i) {
    push(queue, 1 + static_cast<int>(i % 3), tags[i], static_cast<std::uint32_t>(i));
  }
  REQUIRE(queue.keys() == tags.size());
  std::vector<bool> taken(tags.size(), false);
  std::size_t left = tags.size();
  for (std::size_t step = 0; step < tags.size(); ++step) {
    const std::size_t i = (step * 389) % tags.size();  // 389 is prime to 600: every index once
    REQUIRE(!taken[i]);
    REQUIRE(take(queue, 1 + static_cast<int>(i % 3), tags[i]) == i);
    taken[i] = true;
    CHECK(queue.keys() == --left);
    if (step % 50 == 0) {  // every key still queued is found where it is
      for (std::size_t k = 0; k < tags.size(); ++k) {
        const auto at = queue.find(1 + static_cast<int>(k % 3), ctx, tags[k]);
        REQUIRE((at == queue.end()) == taken[k]);
      }
    }
  }
  CHECK(queue.find(commx::any_source, ctx, commx::any_tag) == queue.end());
  // The burst grew the table; once as many messages as it has entries have come and gone
  // since, it is small again, so wildcards scan little.
  for (std::uint32_t i = 0; i < 8192 && queue.table_length() > 16; ++i) {
    push(queue, 2, 5, i);
    REQUIRE(take(queue, 2, 5) == i);
  }
  CHECK(queue.table_length() <= 16);
}

TEST_CASE("a backlog that comes and goes does not resize the table with every burst") {
  // Each call its own tag, a backlog of 40 built and received again and again, last call
  // first, so that the arrivals are indexed. Halving on every drain rebuilt the table (a new
  // allocation) six times a burst.
  shm::unexpected_queue queue;
  int kept = 0;
  std::uint32_t value = 0;
  for (int burst = 0; burst < 10; ++burst) {
    for (int call = 0; call < 40; ++call) push(queue, 1, (burst * 40 + call) * 256 + 3, value++);
    std::uint32_t expected = value;
    REQUIRE(take(queue, 1, (burst * 40 + 39) * 256 + 3) == --expected);
    const std::size_t grown = queue.table_length();
    REQUIRE(grown >= 64);  // the other 39 indexed
    for (int call = 38; call >= 0; --call) {
      REQUIRE(take(queue, 1, (burst * 40 + call) * 256 + 3) == --expected);
    }
    kept += queue.table_length() == grown ? 1 : 0;
  }
  CHECK(kept >= 5);  // it halves once per table's length of messages, not per burst
}

TEST_CASE("receives in arrival order take the arrivals unindexed; others index them in order") {
  // A broadcast's root running ahead: each call its own tag, received in the order sent.
  shm::unexpected_queue queue;
  for (std::uint32_t call = 0; call < 500; ++call)
    push(queue, 1, static_cast<int>(call) * 256 + 3, call);
  for (std::uint32_t call = 0; call < 250; ++call) {
    REQUIRE(take(queue, 1, static_cast<int>(call) * 256 + 3) == call);
  }
  CHECK(queue.table_length() == 0);  // nothing was indexed
  // A receive further on indexes what came before its message, which later receives of
  // either kind still find in arrival order, beside arrivals still unindexed.
  REQUIRE(take(queue, 1, 400 * 256 + 3) == 400);
  CHECK(queue.table_length() > 0);
  push(queue, 1, 250 * 256 + 3, 1000);  // the same key as an indexed message, arriving later
  REQUIRE(take(queue, 1, 250 * 256 + 3) == 250);
  REQUIRE(take(queue, 1, 250 * 256 + 3) == 1000);
  REQUIRE(take(queue, 1, 251 * 256 + 3) == 251);
  REQUIRE(take(queue, commx::any_source, commx::any_tag) == 252);
  for (std::uint32_t call = 253; call < 500; ++call) {
    if (call != 400) REQUIRE(take(queue, 1, static_cast<int>(call) * 256 + 3) == call);
  }
  CHECK(queue.find(commx::any_source, ctx, commx::any_tag) == queue.end());
}

TEST_CASE(
    "payload memory beyond what a slot keeps goes to the next large message, up to a budget") {
  // A flood of 16 KiB messages: each one's memory is the last one's, not a malloc and a free.
  shm::unexpected_queue queue;
  constexpr std::size_t large = 16 * 1024;
  push(queue, 1, 3, 1, large);
  const std::byte* first = queue.find(1, ctx, 3)->eager.data();
  REQUIRE(take(queue, 1, 3) == 1);
  CHECK(queue.pool().held() >= large);
  push(queue, 1, 3, 2, large);
  CHECK(queue.find(1, ctx, 3)->eager.data() == first);
  CHECK(queue.pool().held() == 0);
  REQUIRE(take(queue, 1, 3) == 2);
  // A backlog of 4 MiB taken: the pool keeps no more than its budget.
  for (std::uint32_t i = 0; i < 256; ++i) push(queue, 1, 4, i, large);
  for (std::uint32_t i = 0; i < 256; ++i) REQUIRE(take(queue, 1, 4) == i);
  CHECK(queue.pool().held() <= shm::payload_pool::budget);
  CHECK(queue.pool().held() + large > shm::payload_pool::budget);
  // Small payloads stay with their slots, as before.
  push(queue, 1, 5, 7, 100);
  const std::size_t held = queue.pool().held();
  REQUIRE(take(queue, 1, 5) == 7);
  CHECK(queue.pool().held() == held);
}
