// SPDX-License-Identifier: MIT
// The recycled operations of shm and tcp (detail/operation_pool.hpp): an operation comes back
// only once nobody else holds it, rebuilt from the new arguments; a window of them held at
// once gets distinct ones; past the pool's limit operations are plain allocations.

#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <vector>

#include "commx/transport/detail/operation_pool.hpp"

namespace {

struct fake_operation {
  fake_operation(int peer_rank, int message_tag) : peer(peer_rank), tag(message_tag) {}
  int peer;
  int tag;
  bool done = false;
};

using pool = commx::detail::operation_pool<fake_operation>;

}  // namespace

TEST_CASE("operation_pool reuses an operation nobody holds, rebuilt") {
  pool ops;
  fake_operation* first = nullptr;
  {
    auto op = ops.take(1, 7);
    first = op.get();
    op->done = true;
  }
  auto again = ops.take(2, 9);
  CHECK(again.get() == first);  // recycled, not allocated
  CHECK(again->peer == 2);
  CHECK(again->tag == 9);
  CHECK_FALSE(again->done);  // nothing of its last use is left
}

TEST_CASE("operation_pool never hands out an operation still held") {
  pool ops;
  std::vector<std::shared_ptr<fake_operation>> window;
  for (int i = 0; i < 64; ++i) window.push_back(ops.take(0, i));
  std::set<fake_operation*> distinct;
  for (const auto& op : window) distinct.insert(op.get());
  CHECK(distinct.size() == window.size());
  for (int i = 0; i < 64; ++i) CHECK(window[static_cast<std::size_t>(i)]->tag == i);

  // Half the window done: new operations come from the freed ones, never from the held.
  for (std::size_t i = 0; i < window.size(); i += 2) window[i].reset();
  for (int i = 0; i < 32; ++i) {
    auto op = ops.take(1, 100 + i);
    for (std::size_t j = 1; j < window.size(); j += 2) REQUIRE(op.get() != window[j].get());
    CHECK(op->tag == 100 + i);
  }
}

TEST_CASE("operation_pool keeps at most its limit, and still serves beyond it") {
  pool ops;
  std::vector<std::shared_ptr<fake_operation>> held;
  for (std::size_t i = 0; i < pool::limit + 10; ++i) held.push_back(ops.take(0, 0));
  // The ones past the limit are not kept: once released, only the pool's own stay alive.
  std::weak_ptr<fake_operation> beyond = held.back();
  std::weak_ptr<fake_operation> kept = held.front();
  held.clear();
  CHECK(beyond.expired());
  CHECK_FALSE(kept.expired());
}
