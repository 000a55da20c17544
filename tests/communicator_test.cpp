// SPDX-License-Identifier: MIT
// Sub-communicators, stats, errors and deadlines at the communicator level.

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "support/check.hpp"
#include "support/inproc_job.hpp"

using namespace std::chrono_literals;
using counted =
    commx::communicator<commx::transport::inproc, commx::coll::flat, commx::stats::counting>;
using plain = commx::communicator<commx::transport::inproc>;
using commx::stats::op;

namespace {
template <class Comm = plain, class Fn>
void job(int n, Fn&& fn, std::vector<int> nodes = {}) {
  commx::test::inproc_job<Comm>(n, std::forward<Fn>(fn), std::move(nodes));
}
}  // namespace

TEST_CASE("split groups ranks by color, orders them by key, and isolates their messages",
          "[split]") {
  for (int n : commx::test::test_rank_counts()) {
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job(n, [](plain& world) {
        const int color = world.rank() % 2;
        // Reverse key order: the highest world rank becomes rank 0 of its half.
        plain half = world.split(color, -world.rank());
        const int members = (world.size() + 1 - color) / 2;
        COMMX_CHECK_EQ(half.size(), members);
        COMMX_CHECK_EQ(half.world_rank_of(half.rank()), world.rank());
        for (int r = 1; r < half.size(); ++r) {
          COMMX_CHECK(half.world_rank_of(r) < half.world_rank_of(r - 1));
        }
        int sum = world.rank();
        half.allreduce(sum, std::plus<>{});
        int expected = 0;
        for (int r = color; r < world.size(); r += 2) expected += r;
        COMMX_CHECK_EQ(sum, expected);

        // A rank with undefined_color is in no new communicator.
        plain some = world.split(world.rank() == 0 ? commx::undefined_color : 0, 0);
        COMMX_CHECK_EQ(some.is_null(), world.rank() == 0);
        if (!some.is_null()) COMMX_CHECK_EQ(some.size(), world.size() - 1);
        if (some.is_null()) {
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, some.barrier());
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, (void)some.split(0, 0));
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, (void)some.dup());
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, (void)some.transport());
          std::vector<int> data(4);
          const std::vector<std::size_t> counts{1, 1};
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, some.alltoall(data, data));
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument, some.allgatherv(data, data, counts));
          COMMX_EXPECT_ERROR(commx::errc::invalid_argument,
                             some.reduce_scatter_block(data, data, std::plus<>{}));
        }

        // A nested split of a split still gets a context of its own.
        plain quarter = half.split(half.rank() % 2, half.rank());
        plain again = half.dup();
        quarter.barrier();
        again.barrier();
        COMMX_CHECK_EQ(again.size(), half.size());
      }));
    }
  }
}

TEST_CASE("split_by_node follows the transport's locality", "[fixed]") {
  REQUIRE_NOTHROW(job(5,
                      [](plain& world) {
                        plain node = world.split_by_node();
                        const int my_node = world.node_of(world.rank());
                        for (int r = 0; r < node.size(); ++r)
                          COMMX_CHECK_EQ(world.node_of(node.world_rank_of(r)), my_node);
                        COMMX_CHECK_EQ(node.size(), my_node == 0 ? 2 : (my_node == 1 ? 2 : 1));
                      },
                      {0, 1, 0, 1, 2}));
  REQUIRE_NOTHROW(job(3, [](plain& world) {
    COMMX_CHECK_EQ(world.split_by_node().size(), 3);  // one node by default
  }));
}

TEST_CASE("counting stats: calls, messages, bytes and times per operation", "[fixed]") {
  REQUIRE_NOTHROW(job<counted>(4, [](counted& world) {
    std::vector<double> data(100, 1.0);
    world.bcast(data, 2);
    const auto& bcast = world.stats().of(op::bcast);
    COMMX_CHECK_EQ(bcast.calls, std::uint64_t{1});
    // flat: the root sends p-1 messages, every other rank receives one.
    COMMX_CHECK_EQ(bcast.messages_sent, world.rank() == 2 ? std::uint64_t{3} : std::uint64_t{0});
    COMMX_CHECK_EQ(bcast.messages_received,
                   world.rank() == 2 ? std::uint64_t{0} : std::uint64_t{1});
    COMMX_CHECK_EQ(bcast.bytes_received, world.rank() == 2 ? std::uint64_t{0} : std::uint64_t{800});
    COMMX_CHECK(bcast.collective_seconds > 0);

    if (world.rank() == 0) world.send(1, 0, data);
    if (world.rank() == 1) world.recv(0, 0, data);
    const auto& send = world.stats().of(op::send);
    const auto& recv = world.stats().of(op::recv);
    COMMX_CHECK_EQ(send.bytes_sent, world.rank() == 0 ? std::uint64_t{800} : std::uint64_t{0});
    COMMX_CHECK_EQ(recv.bytes_received, world.rank() == 1 ? std::uint64_t{800} : std::uint64_t{0});
    COMMX_CHECK_EQ(world.stats().total().calls,
                   world.rank() <= 1 ? std::uint64_t{2} : std::uint64_t{1});
    COMMX_CHECK(world.stats().report().find("bcast") != std::string::npos);
    world.stats().reset();
    COMMX_CHECK_EQ(world.stats().total().calls, std::uint64_t{0});
  }));
}

TEST_CASE("stats::none adds nothing to what a rank holds", "[fixed]") {
  using none_state = commx::detail::rank_state<commx::transport::inproc, commx::stats::none>;
  using counting_state =
      commx::detail::rank_state<commx::transport::inproc, commx::stats::counting>;
  STATIC_REQUIRE(std::is_empty_v<commx::stats::none>);
  STATIC_REQUIRE(sizeof(none_state) ==
                 sizeof(commx::transport::inproc) + sizeof(commx::context_id) +
                     sizeof(commx::detail::running_collectives) +
                     sizeof(commx::detail::recovery_state<commx::transport::inproc>));
  STATIC_REQUIRE(sizeof(counting_state) > sizeof(none_state));
  STATIC_REQUIRE(std::is_empty_v<commx::detail::stopwatch<commx::stats::none>>);
}

TEST_CASE("run_inproc refuses impossible jobs with invalid_argument", "[fixed]") {
  auto nothing = [](plain&) {};
  for (int n : {0, -1}) {
    try {
      commx::run_inproc<plain>(n, nothing);
      FAIL("no error for " << n << " ranks");
    } catch (const commx::error& e) {
      CHECK(e.code() == commx::errc::invalid_argument);
    }
  }
  commx::inproc_options opts;
  opts.nodes = {0, -1};
  REQUIRE_THROWS_AS(commx::run_inproc<plain>(2, nothing, opts), commx::error);
}

TEST_CASE("deadlines saturate instead of overflowing", "[fixed]") {
  STATIC_REQUIRE(commx::clamped(std::chrono::years(1000)) == commx::clock::duration::max());
  STATIC_REQUIRE(commx::clamped(std::chrono::seconds(-5)) == commx::clock::duration::zero());
  STATIC_REQUIRE(commx::clamped(std::chrono::seconds(2)) == std::chrono::seconds(2));
  const auto far = commx::deadline(std::chrono::years(1000)).resolve({});
  CHECK(far > commx::clock::now() + std::chrono::hours(24 * 365));
}

TEST_CASE("errc is a std::error_code enum with portable conditions", "[fixed]") {
  std::error_code ec = commx::errc::timeout;
  CHECK(ec.category().name() == std::string("commx"));
  CHECK(ec == std::errc::timed_out);
  CHECK(std::error_code(commx::errc::truncated) == std::errc::message_size);
  CHECK(std::error_code(commx::errc::peer_lost) == std::errc::connection_reset);
  CHECK(ec.message() == "deadline passed");
  const commx::error e(commx::errc::peer_lost, "rank 1: recv peer 2");
  const std::system_error& base = e;
  CHECK(base.code() == commx::errc::peer_lost);
  CHECK(std::string(e.what()).find("rank 1: recv peer 2") != std::string::npos);
}

TEST_CASE("collectives time out as a whole, naming the collective", "[fixed]") {
  REQUIRE_NOTHROW(job(3, [](plain& world) {
    if (world.rank() == 1) return;  // never joins
    // Rank 0 learns that rank 1 is gone; rank 2 then learns that rank 0 failed.
    COMMX_EXPECT_ERROR(commx::errc::peer_lost, world.barrier(20s));
  }));
  REQUIRE_NOTHROW(job(2, [](plain& world) {
    world.barrier();
    if (world.rank() == 0) {
      // Rank 1 is alive but busy elsewhere: rank 0's bcast misses its deadline.
      std::vector<int> data(4);
      const auto e = COMMX_EXPECT_ERROR(commx::errc::timeout, world.bcast(data, 1, 100ms));
      COMMX_CHECK(std::string_view(e.what()).find("bcast") != std::string_view::npos);
      world.send(1, 0, 1);
    } else {
      int go = 0;
      world.recv(0, 0, go);
    }
  }));
}
