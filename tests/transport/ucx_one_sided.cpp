// SPDX-License-Identifier: MIT
// Two ranks on transport::ucx over UCX's shared memory (UCX_TLS=posix,cma,self): rank 0 puts
// into and adds to rank 1's window (memory the window allocates, so UCX allocated it), while
// rank 1 watches that memory without calling commx, for at most 30 s. Were the operations
// served by the target (commx's messages, or UCX emulating them), rank 1 would never see them
// and the test fails. A window over rank 1's own vector is carried by UCP's RMA too, but UCX's
// shared memory cannot reach memory it did not allocate, so UCX emulates it: rank 0's put there
// lands by the fence both call. Rank 0 prints the verdict the test looks for.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/ucx.hpp"
#include "commx/window.hpp"

namespace {

using world_type = commx::communicator<commx::transport::ucx>;
using window_type = commx::window<std::int64_t, world_type>;

// Watches `cell` until it holds `expected` or 30 s pass, without calling commx.
bool arrives(std::int64_t& cell, std::int64_t expected) {
  const auto until = commx::clock::now() + std::chrono::seconds(30);
  std::atomic_ref<std::int64_t> watched(cell);
  while (commx::clock::now() < until) {
    if (watched.load(std::memory_order_acquire) == expected) return true;
  }
  return false;
}

}  // namespace

int main() {
  auto world = world_type::from_env();
  if (world.size() != 2) return 2;
  window_type allocated(world, 2);
  std::vector<std::int64_t> mine(1, 0);
  window_type given(world, std::span<std::int64_t>(mine));
  if (!allocated.carried_by_transport() || !given.carried_by_transport()) {
    fmt::print("rank {}: a window is not carried by UCP's RMA\n", world.rank());
    return 1;
  }
  allocated.fence();
  given.fence();
  int seen = 0;
  if (world.rank() == 0) {
    allocated.put(std::int64_t{42}, 1, 0);
    allocated.flush(1);
    // An atomic that waits for its answer: rank 1 is still watching, not calling commx.
    const std::int64_t before = allocated.fetch_and_op(std::int64_t{5}, 1, 1, std::plus<>{});
    world.recv(1, 1, seen);
    given.put(std::int64_t{43}, 1, 0);
    given.fence();
    fmt::print("rank 0: fetch_and_op saw {}; rank 1 saw {} of 2 operations without calling commx\n",
               before, seen);
    if (before == 0 && seen == 2) fmt::print("one-sided: the target did nothing\n");
  } else {
    seen = (arrives(allocated.local()[0], 42) ? 1 : 0) + (arrives(allocated.local()[1], 5) ? 1 : 0);
    world.send(0, 1, seen);
    given.fence();
    if (mine[0] != 43) {
      fmt::print("rank 1: the put into its own vector did not land by the fence\n");
      seen = 0;
    }
  }
  allocated.free();
  given.free();
  return seen == 2 ? 0 : 1;
}
