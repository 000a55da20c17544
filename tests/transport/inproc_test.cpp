// SPDX-License-Identifier: MIT
// What is particular to the in-process transport (the conformance suite is conformance_test.cpp).

#include <catch2/catch.hpp>

#include <atomic>
#include <latch>
#include <memory>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

#include "commx/launch.hpp"
#include "commx/transport/inproc.hpp"
#include "support/check.hpp"
#include "support/inproc_job.hpp"

using comm = commx::communicator<commx::transport::inproc>;
using namespace std::chrono_literals;

namespace {
commx::inproc_options test_options() { return commx::test::job_options(); }
}  // namespace

TEST_CASE("inproc: run_inproc rethrows the first failure after releasing the others", "[fixed]") {
  std::atomic<int> released{0};
  auto job = [&](comm& world) {
    if (world.rank() == 2) throw std::runtime_error("rank 2 gives up");
    try {
      // Ranks 0, 1, 3 wait on rank 2 in different ways; none may wait for the deadline.
      int got = 0;
      if (world.rank() == 0) world.recv(2, 0, got);
      if (world.rank() == 1) world.recv(commx::any_source, 0, got);
      if (world.rank() == 3) world.bcast(got, 2);
    } catch (const commx::error& e) {
      if (e.code() == commx::errc::peer_lost) ++released;
      throw;
    }
  };
  const auto start = commx::clock::now();
  REQUIRE_THROWS_WITH(commx::run_inproc<comm>(4, job, test_options()), "rank 2 gives up");
  CHECK(released == 3);
  CHECK(commx::clock::now() - start < 30s);
}

TEST_CASE("inproc: a failure's cause reaches the rank that waits on its echo", "[fixed]") {
  // Rank 2 fails; rank 1, waiting on it, fails of that; rank 0 waits on rank 1 only.
  // Only rank 0's thread writes these; they are read once every rank has ended.
  std::string what;
  std::vector<int> known;
  auto job = [&](comm& world) {
    if (world.rank() == 2) throw std::runtime_error("rank 2 gives up");
    int got = 0;
    if (world.rank() == 1) {
      world.recv(2, 0, got);  // peer_lost: rank 1 ends with it
      return;
    }
    try {
      world.recv(1, 0, got);
    } catch (const commx::error& e) {
      if (e.code() == commx::errc::peer_lost) what = e.what();
      known = world.known_lost();
    }
  };
  REQUIRE_THROWS_WITH(commx::run_inproc<comm>(3, job, test_options()), "rank 2 gives up");
  INFO("rank 0's peer_lost: " << what);
  CHECK(what.find("peer 1 is gone") != std::string::npos);
  CHECK(what.find("peer 2") != std::string::npos);  // the cause, not only the echo
  CHECK(known == std::vector<int>{2, 1});  // the hub sees the failures in the order they were
}

TEST_CASE("inproc: sends are buffered up to a bound, then wait for their receive", "[fixed]") {
  commx::run_inproc<comm>(
      2,
      [](comm& world) {
        if (world.rank() == 0) {
          std::vector<char> small(1024, 'a');
          std::vector<char> large(std::size_t{1} << 20, 'b');
          auto s = world.isend(1, 0, small);
          COMMX_CHECK(s.test().has_value());  // buffered at once: the caller may reuse `small`
          auto l = world.isend(1, 1, large);
          COMMX_CHECK(
              !l.test().has_value());  // too large to buffer: completes when rank 1 takes it
          world.barrier();
          l.wait();
        } else {
          world.barrier();
          std::vector<char> got;
          world.recv(0, 1, got);
          COMMX_CHECK(got.size() == std::size_t{1} << 20);
          world.recv(0, 0, got);
          COMMX_CHECK(got == std::vector<char>(1024, 'a'));
        }
      },
      test_options());
}

TEST_CASE("inproc: a backlog of 30,000 messages is received tag by tag, each tag in its order",
          "[fixed]") {
  // Past the eager bound the rest wait at the sender as rendezvous: the receiver's queue holds
  // both kinds, and the latest tag is taken first (later tags overtake earlier ones, no message
  // another of its tag); then wildcards over five tags take the earliest arrival.
  constexpr int count = 30'000;
  std::atomic<int> failures{0};
  auto job = [&](comm& world) {
    if (world.rank() == 0) {
      std::vector<std::vector<int>> out(count);
      std::vector<comm::request> sends;
      for (int i = 0; i < count; ++i) {
        auto& message = out[static_cast<std::size_t>(i)];
        for (int w = 0; w < i % 7; ++w) message.push_back(i * 16 + w);
        sends.push_back(world.isend(1, i % 3, message));
      }
      world.barrier();
      commx::wait_all(sends);
      for (int i = 0; i < 300; ++i) world.send(1, 10 + i % 5, i);
      world.send(1, 20, count);
      return;
    }
    world.barrier();  // every send is posted
    for (int tag = 2; tag >= 0; --tag) {
      for (int i = tag; i < count; i += 3) {
        std::vector<int> got;
        const auto st = world.recv(0, tag, got);
        bool right = st.tag == tag && got.size() == static_cast<std::size_t>(i % 7);
        for (int w = 0; right && w < i % 7; ++w)
          right = got[static_cast<std::size_t>(w)] == i * 16 + w;
        if (!right) ++failures;
      }
    }
    world.probe(0, 20);
    for (int i = 0; i < 300; ++i) {
      int got = -1;
      const auto st = world.recv(commx::any_source, commx::any_tag, got);
      if (got != i || st.tag != 10 + i % 5) ++failures;
    }
    int total = 0;
    world.recv(0, 20, total);
    if (total != count) ++failures;
  };
  REQUIRE_NOTHROW(commx::run_inproc<comm>(2, job, test_options()));
  CHECK(failures == 0);
}

TEST_CASE("inproc: node ids come from the options", "[fixed]") {
  commx::inproc_options opts = test_options();
  opts.nodes = {0, 0, 1, 1};
  commx::run_inproc<comm>(
      4,
      [](comm& world) {
        COMMX_CHECK_EQ(world.node_of(1), 0);
        COMMX_CHECK_EQ(world.node_of(2), 1);
        comm node = world.split_by_node();
        COMMX_CHECK_EQ(node.size(), 2);
        COMMX_CHECK_EQ(node.rank(), world.rank() % 2);
        COMMX_CHECK_EQ(node.world_rank_of(0), world.rank() < 2 ? 0 : 2);
      },
      opts);
  opts.nodes = {0, 1};
  REQUIRE_THROWS_AS(commx::run_inproc<comm>(
                        3, [](comm&) {}, opts),
                    commx::error);
}

TEST_CASE(
    "inproc: a flood of unexpected messages is copied up to eager_limit per receiver, the "
    "rest wait at their senders; none is lost or reordered",
    "[fixed]") {
  // HPVM's demand (seed 001, Fig. 6): many senders, no receive posted, bounded memory.
  constexpr int senders = 3;
  constexpr int per_sender = 200;
  constexpr std::size_t limit = std::size_t{64} << 10;
  commx::transport::inproc::hub_options layout;
  layout.eager_limit = limit;
  auto hub = std::make_shared<commx::transport::inproc::hub>(senders + 1, std::move(layout));
  std::latch all_posted(senders);
  std::size_t buffered_at_peak = 0;
  std::size_t buffered_after = 1;
  std::vector<std::vector<int>> order(senders + 1);
  std::atomic<int> failures{0};
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r <= senders; ++r) {
      ranks.emplace_back([&, r] {
        try {
          comm world(commx::transport::inproc(hub, r));
          if (r > 0) {
            std::vector<std::vector<int>> out(per_sender);
            std::vector<comm::request> sends;
            for (int i = 0; i < per_sender; ++i) {  // 1 KiB each: 600 KiB against 64 KiB
              out[static_cast<std::size_t>(i)].assign(256, i);
              sends.push_back(world.isend(0, 5, out[static_cast<std::size_t>(i)]));
            }
            all_posted.count_down();
            commx::wait_all(sends);
            return;
          }
          all_posted.wait();
          buffered_at_peak = hub->buffered_bytes(0);
          for (int m = 0; m < senders * per_sender; ++m) {
            std::vector<int> got;
            const commx::status st = world.recv(commx::any_source, 5, got);
            order[static_cast<std::size_t>(st.source)].push_back(got.at(0));
            if (got != std::vector<int>(256, got.at(0))) ++failures;
          }
          buffered_after = hub->buffered_bytes(0);
        } catch (...) {
          ++failures;
        }
      });
    }
  }
  CHECK(failures == 0);
  CHECK(buffered_at_peak <= limit);
  CHECK(buffered_at_peak > limit - 1024);  // it buffered up to the bound, not nothing
  CHECK(buffered_after == 0);
  for (int s = 1; s <= senders; ++s) {
    std::vector<int> expected(per_sender);
    for (int i = 0; i < per_sender; ++i) expected[static_cast<std::size_t>(i)] = i;
    CHECK(order[static_cast<std::size_t>(s)] == expected);
  }
}
