// SPDX-License-Identifier: MIT
// A shm rank that heard from many senders polls most of them only at times (cold,
// detail/shm/polled_senders.hpp); what a receive waits for must not wait for those times. A
// receive naming a cold sender makes it hot: a test() loop finds its message at the first poll
// after it arrived. An any_source receive has a chunk of the cold senders looked at every
// poll: found within (cold senders / chunk) polls, not cold_every times as many.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "commx/transport/shm.hpp"
#include "transport/eventually.hpp"
#include "transport/shm_threads.hpp"

using namespace std::chrono_literals;

using commx::test::eventually;

TEST_CASE("a receive's sender is polled at every poll though it was cold", "[shm]") {
  using commx::detail::shm::polled_senders;
  constexpr int senders = 16;
  constexpr int ranks = senders + 1;
  constexpr int hello = 1, named = 2, any = 3, never = 99;
  const std::string name = "commx_test_cold_" + std::to_string(::getpid());
  // tag x ranks + the sender whose message rank 0 now waits for (one word: a sender must not
  // see one round's tag beside another's sender), and the same once it is in rank 0's ring.
  std::atomic<int> asked{0};
  std::atomic<int> answered{0};
  std::atomic<bool> done{false};
  std::vector<int> named_polls, any_polls;  // test() calls until each receive completed
  std::atomic<int> failures{0};
  commx::test::shm_ranks_as_threads(name, ranks, [&](commx::transport::shm& t, int r) {
    std::array<std::byte, 1> byte{};
    const auto buffer = commx::transport::recv_buffer(byte);
    if (r != 0) {
      const auto send = [&](int tag) {
        const auto done_sending = t.send_blocking(0, 0, tag, byte, 30s, 30s);
        if (!done_sending || done_sending->error) ++failures;
      };
      send(hello);
      for (const int tag : {named, any}) {
        if (!eventually([&] { return asked.load() == tag * ranks + r; })) ++failures;
        send(tag);
        answered = tag * ranks + r;
      }
      (void)eventually([&] { return done.load(); });
      return;
    }
    for (int k = 0; k < senders; ++k) {  // every sender heard from: all hot
      const auto got = t.recv_blocking(commx::any_source, 0, hello, buffer, 30s, 30s);
      if (!got || got->error) ++failures;
    }
    // Then quiet for twice cool_after polls: all cold.
    const auto cool = [&] {
      auto waiting = t.irecv(1, 0, never, buffer);
      for (std::uint64_t poll = 0; poll <= 2 * polled_senders::cool_after; ++poll) {
        if (t.test(waiting)) ++failures;
      }
      if (!t.cancel(waiting)) ++failures;
    };
    const auto polls_to_receive = [&](int from, int tag, int sender) {
      auto receive = t.irecv(from, 0, tag, buffer);
      asked = tag * ranks + sender;
      if (!eventually([&] { return answered.load() == tag * ranks + sender; })) ++failures;
      int polls = 0;
      while (!t.test(receive) && polls < 100000) ++polls;
      return polls;
    };
    cool();
    for (int k = 1; k <= senders; ++k) named_polls.push_back(polls_to_receive(k, named, k));
    cool();
    for (int k = 1; k <= senders; ++k) {
      any_polls.push_back(polls_to_receive(commx::any_source, any, k));
    }
    done = true;
  });
  REQUIRE(failures == 0);
  REQUIRE(named_polls.size() == senders);
  REQUIRE(any_polls.size() == senders);
  INFO("test() calls after the message was in the ring, by sender");
  CAPTURE(named_polls, any_polls);
  // Found at the first poll after it arrived (a test() that finds it returns true: 0 more).
  CHECK(*std::max_element(named_polls.begin(), named_polls.end()) == 0);
  // Found within a round of the cold senders' chunks (cold_every times as many without).
  constexpr auto chunks = (senders + polled_senders::cold_chunk - 1) / polled_senders::cold_chunk;
  CHECK(*std::max_element(any_polls.begin(), any_polls.end()) <= static_cast<int>(chunks));
}
