// SPDX-License-Identifier: MIT
// Whom a shm rank polls (polled_senders.hpp), in one process: a rank that heard from many
// senders keeps polling at every turn only those it heard from last, looks at the others at
// times and whenever it may sleep, and takes a cold sender that wrote back among the hot.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commx/transport/detail/shm/polled_senders.hpp"

namespace shm = commx::detail::shm;

namespace {

std::vector<int> sorted(std::span<const int> ranks) {
  std::vector<int> out(ranks.begin(), ranks.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("up to twice keep_hot senders, every one is polled at every turn", "[shm]") {
  constexpr int n = static_cast<int>(2 * shm::polled_senders::keep_hot) + 1;
  shm::polled_senders senders(n);
  for (int peer = 1; peer < n; ++peer) senders.add(peer);
  for (int poll = 0; poll < 100; ++poll) {
    for (int peer = 1; peer < n; ++peer) senders.heard(peer);
    CHECK_FALSE(senders.start_poll());
    senders.cool_if_crowded();
  }
  CHECK(senders.hot().size() == 2 * shm::polled_senders::keep_hot);
  CHECK(senders.cold().empty());
  CHECK(senders.next_cold_chunk().empty());
}

TEST_CASE("beyond, those heard from last stay hot and the others cool", "[shm]") {
  constexpr std::size_t keep = shm::polled_senders::keep_hot;
  constexpr std::size_t chunk = shm::polled_senders::cold_chunk;
  constexpr int n = 128;
  shm::polled_senders senders(n);
  for (int peer = 1; peer < n; ++peer) senders.add(peer);  // an alltoall's senders
  CHECK(senders.polls(5));
  CHECK_FALSE(senders.polls(0));
  (void)senders.start_poll();
  // The ranks 1..keep write again; the rest stay quiet.
  for (int peer = 1; peer <= static_cast<int>(keep); ++peer) senders.heard(peer);
  senders.cool_if_crowded();
  std::vector<int> expected_hot;
  for (int peer = 1; peer <= static_cast<int>(keep); ++peer) expected_hot.push_back(peer);
  CHECK(sorted(senders.hot()) == expected_hot);
  const std::size_t cold = static_cast<std::size_t>(n - 1) - keep;
  CHECK(senders.cold().size() == cold);
  CHECK(senders.polls(100));  // cold, still polled

  SECTION("each look takes the next chunk of cold senders, every one in turn") {
    std::vector<int> seen;
    for (std::size_t look = 0; look < (cold + chunk - 1) / chunk; ++look) {
      const auto part = senders.next_cold_chunk();
      CHECK(part.size() <= chunk);
      CHECK_FALSE(part.empty());
      seen.insert(seen.end(), part.begin(), part.end());
    }
    CHECK(sorted(seen) == sorted(senders.cold()));
    CHECK(senders.next_cold_chunk().front() == senders.cold().front());  // round again
  }

  SECTION("a poll or a spinning wait's look takes the next chunk only every cold_every-th time") {
    constexpr auto every = shm::polled_senders::cold_every;
    std::vector<int> seen;
    std::size_t chunks = 0;
    for (std::size_t look = 1; look <= every * ((cold + chunk - 1) / chunk); ++look) {
      const auto part = senders.sparse_cold_chunk();
      CHECK(part.empty() == (look % every != 0));
      chunks += part.empty() ? 0 : 1;
      seen.insert(seen.end(), part.begin(), part.end());
    }
    CHECK(chunks == (cold + chunk - 1) / chunk);
    CHECK(sorted(seen) == sorted(senders.cold()));
  }

  SECTION("a receive naming a cold sender makes it hot; naming a hot one or a stranger, nothing") {
    const std::vector<int> hot_before(senders.hot().begin(), senders.hot().end());
    const int awaited = senders.cold().front();
    senders.awaited(awaited);
    CHECK(std::count(senders.hot().begin(), senders.hot().end(), awaited) == 1);
    CHECK(std::count(senders.cold().begin(), senders.cold().end(), awaited) == 0);
    const auto hot_count = senders.hot().size();
    senders.awaited(hot_before.front());
    senders.awaited(0);  // never wrote: not polled at all
    CHECK(senders.hot().size() == hot_count);
    CHECK(std::count(senders.hot().begin(), senders.hot().end(), 0) == 0);
  }

  SECTION("a look that found a record makes the next poll take every cold sender") {
    CHECK_FALSE(senders.start_poll());
    senders.cold_due();
    CHECK(senders.start_poll());
    CHECK_FALSE(senders.start_poll());
  }

  SECTION("a cold sender that writes is hot again, the last cold one in its place") {
    const std::vector<int> cold_before(senders.cold().begin(), senders.cold().end());
    const int woken = cold_before[3];
    senders.warm(woken);
    CHECK(std::count(senders.hot().begin(), senders.hot().end(), woken) == 1);
    CHECK(std::count(senders.cold().begin(), senders.cold().end(), woken) == 0);
    CHECK(senders.cold()[3] == cold_before.back());
    CHECK(senders.cold().size() == cold_before.size() - 1);
    senders.warm(woken);  // hot already: nothing changes
    CHECK(std::count(senders.hot().begin(), senders.hot().end(), woken) == 1);
    // The one moved into its place is still found by its own warm.
    senders.warm(cold_before.back());
    CHECK(std::count(senders.cold().begin(), senders.cold().end(), cold_before.back()) == 0);
    CHECK(senders.cold().size() == cold_before.size() - 2);
  }
}

TEST_CASE("a hot sender that wrote nothing for cool_after polls cools", "[shm]") {
  constexpr auto period = shm::polled_senders::cool_after;
  shm::polled_senders senders(8);
  for (int peer = 1; peer < 8; ++peer) senders.add(peer);  // at poll 0
  // Ranks 1 and 2 keep writing; the others wrote once, when they were found.
  for (std::uint64_t poll = 1; poll < period; ++poll) {
    (void)senders.start_poll();
    senders.heard(1);
    senders.heard(2);
  }
  CHECK(senders.hot().size() == 7);
  (void)senders.start_poll();  // poll `period`: the quiet ones cool
  CHECK(sorted(senders.hot()) == std::vector<int>{1, 2});
  CHECK(sorted(senders.cold()) == std::vector<int>{3, 4, 5, 6, 7});
  // Rank 2 stops; a period later only rank 1 is hot.
  for (std::uint64_t poll = 1; poll <= period; ++poll) {
    CHECK_FALSE(senders.start_poll());
    senders.heard(1);
  }
  CHECK(sorted(senders.hot()) == std::vector<int>{1});
  CHECK(senders.cold().size() == 6);
}
