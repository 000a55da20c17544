// SPDX-License-Identifier: MIT
// detail::local_shared, the owner count a rank's communicators and requests share, and what it
// must give a user: a request that outlives every handle onto its communicator still completes.

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <utility>

#include "commx/communicator.hpp"
#include "commx/detail/local_shared.hpp"
#include "commx/transport/inproc.hpp"

namespace {

// Counts its own destructions, so a test sees exactly one per made object.
struct tally {
  explicit tally(int& ended) : ended_(&ended) {}
  tally(const tally&) = delete;
  tally& operator=(const tally&) = delete;
  ~tally() { ++*ended_; }
  int* ended_;
};

using handle = commx::detail::local_shared<tally>;

}  // namespace

TEST_CASE("local_shared destroys its object once, when its last owner goes", "[local_shared]") {
  int ended = 0;
  {
    handle first = handle::make(ended);
    CHECK(first.use_count() == 1);
    handle second = first;
    CHECK(second.use_count() == 2);
    CHECK(second == first);
    {
      handle third = second;
      CHECK(first.use_count() == 3);
    }
    CHECK(first.use_count() == 2);
    handle moved = std::move(second);
    CHECK(second == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty, checked
    CHECK(second.use_count() == 0);
    CHECK(moved.use_count() == 2);
    first.reset();
    CHECK(ended == 0);
    CHECK(moved.use_count() == 1);
    const handle& same = moved;
    moved = same;  // self-assignment keeps its one owner
    CHECK(moved.use_count() == 1);
    CHECK(ended == 0);
  }
  CHECK(ended == 1);
}

TEST_CASE("local_shared's assignment releases what the target owned", "[local_shared]") {
  int a_ended = 0;
  int b_ended = 0;
  handle a = handle::make(a_ended);
  handle b = handle::make(b_ended);
  b = a;
  CHECK(b_ended == 1);
  CHECK(a_ended == 0);
  CHECK(a.use_count() == 2);
  handle c = handle::make(b_ended);
  a = std::move(c);
  CHECK(b.use_count() == 1);
  b.reset();
  CHECK(a_ended == 1);
  CHECK(b_ended == 1);
  a.reset();
  CHECK(b_ended == 2);
}

TEST_CASE("a request outlives every handle onto its communicator", "[local_shared]") {
  using comm = commx::communicator<commx::transport::inproc>;
  auto hub =
      std::make_shared<commx::transport::inproc::hub>(1, commx::transport::inproc::hub_options{});
  std::array<int, 4> in{};
  const std::array<int, 4> out{1, 2, 3, 4};
  comm::request receive;
  comm::request send;
  {
    comm world(commx::transport::inproc(hub, 0));
    comm copy = world;
    receive = copy.irecv(0, 7, std::span<int>(in));
    send = world.isend(0, 7, std::span<const int>(out));
  }  // both handles gone: the requests keep the rank
  const commx::status got = receive.wait();
  send.wait();
  CHECK(got.source == 0);
  CHECK(got.tag == 7);
  CHECK(in == out);
  // A pending receive whose communicator is gone is withdrawn by its destructor, on a rank
  // that still exists (ASan's build sees any use after free).
  {
    comm world(commx::transport::inproc(hub, 0));
    receive = world.irecv(0, 8, std::span<int>(in));
  }
  CHECK(receive.active());
  CHECK(receive.cancel());
}
