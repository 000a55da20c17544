// SPDX-License-Identifier: MIT
// A 2-rank shm job for the COMMX_LOG events shm_check.cmake looks for:
//
//   commxrun -n 2 log_shm_job peer-lost   rank 1 ends without leaving the job; rank 0 notices
//   commxrun -n 2 log_shm_job timeout     rank 0's receive from rank 1 passes its deadline
//   commxrun -n 2 log_shm_job probe-timeout   rank 0's probe for rank 1 passes its deadline
//   commxrun -n 2 log_shm_job agree-lost  rank 1 ends as in peer-lost; rank 0 agrees alone, and
//                                         at debug says how (fallback, coordinator, decision)
//   commxrun -n 2 log_shm_job large-ways  40 ping-pongs of 256 KiB, then 40 exchanges; under
//                                         COMMX_SHM_LARGE=auto each rank's debug line at the
//                                         end says what each way cost, per size and shape;
//                                         under shape, how many it took each way
//
// Rank 0 prints the exception's text on stdout ("what: ..."), so the check can compare the log
// line with it. Exit status 0 only when rank 0 saw the error it was meant to see.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/shm.hpp"

namespace {

// Ping-pongs (one way at a time), then exchanges (both ways at once), each message checked.
int large_ways(commx::communicator<commx::transport::shm>& world) {
  const int peer = 1 - world.rank();
  std::vector<unsigned> mine(std::size_t{64} << 10);
  std::vector<unsigned> theirs(mine.size());
  const auto fill = [](std::vector<unsigned>& v, int from, int round) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<unsigned>(from * 1'000'003 + round * 7919) + static_cast<unsigned>(i);
    }
  };
  const auto check = [&](int round) {
    std::vector<unsigned> expected(theirs.size());
    fill(expected, peer, round);
    return expected == theirs;
  };
  for (int round = 0; round < 40; ++round) {
    fill(mine, world.rank(), round);
    if (world.rank() == 0) {
      world.send(peer, 3, std::span<const unsigned>(mine));
      world.recv(peer, 3, std::span<unsigned>(theirs));
    } else {
      world.recv(peer, 3, std::span<unsigned>(theirs));
      world.send(peer, 3, std::span<const unsigned>(mine));
    }
    if (!check(round)) return 1;
  }
  for (int round = 0; round < 40; ++round) {
    fill(mine, world.rank(), round);
    auto sent = world.isend(peer, 4, std::span<const unsigned>(mine));
    world.recv(peer, 4, std::span<unsigned>(theirs));
    sent.wait();
    if (!check(round)) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const bool agree_lost = std::strcmp(argv[1], "agree-lost") == 0;
  const bool peer_lost = agree_lost || std::strcmp(argv[1], "peer-lost") == 0;
  const bool probe = std::strcmp(argv[1], "probe-timeout") == 0;
  auto world = commx::communicator<commx::transport::shm>::from_env();
  if (world.size() != 2) return 2;
  if (std::strcmp(argv[1], "large-ways") == 0) return large_ways(world);
  int value = 0;
  if (world.rank() == 1) {
    if (peer_lost) {
      world.send(0, 1, value);
      // Abruptly, as a crash would (no goodbye in the segment), but with status 0: commxrun
      // then leaves rank 0 running, to notice the loss by itself.
      std::fflush(nullptr);
      ::_exit(0);
    }
    world.recv(0, 2, value);  // rank 0 is done timing out: only now may this rank leave
    return 0;
  }
  if (agree_lost) {
    world.recv(1, 1, value);
    const commx::agreement<int> agreed = world.agree(1, std::bit_or<>{});
    fmt::print("what: agreed {} without [{}]\n", agreed.value, fmt::join(agreed.lost, ", "));
    std::fflush(stdout);
    return agreed.value == 1 && agreed.lost == std::vector<int>{1} ? 0 : 1;
  }
  const commx::errc expected = peer_lost ? commx::errc::peer_lost : commx::errc::timeout;
  try {
    if (peer_lost) {
      world.recv(1, 1, value);
      world.recv(1, 2, value);  // never sent: rank 1 is gone
    } else if (probe) {
      (void)world.probe(1, 7, std::chrono::milliseconds(100));  // never sent
    } else {
      world.recv(1, 7, value, std::chrono::milliseconds(100));  // never sent
    }
    return 1;
  } catch (const commx::error& e) {
    fmt::print("what: {}\n", e.what());
    std::fflush(stdout);
    if (e.code() != expected) return 1;
  }
  if (!peer_lost) world.send(1, 2, value);
  return 0;
}
