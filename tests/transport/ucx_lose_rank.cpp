// SPDX-License-Identifier: MIT
// A job of 3 ranks on transport::ucx under commxrun --keep-going: rank 2 sends each survivor
// a message and kills itself (SIGKILL). Each survivor must receive that message (sent before
// the loss), then see errc::peer_lost on a receive from rank 2 within its deadline and rank 2
// among known_lost(); rank 1 tells rank 0 what it saw, and rank 0 prints the verdict the test
// looks for. On one node the loss is found by watching the process (UCX's shared memory has no
// peer error handling); on three (--nodes 3) by UCX's own error handling over TCP.

#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/ucx.hpp"

int main() {
  using namespace std::chrono_literals;
  auto world = commx::communicator<commx::transport::ucx>::from_env();
  if (world.size() != 3) return 2;
  world.barrier();
  if (world.rank() == 2) {
    world.send(0, 1, 7);
    world.send(1, 1, 7);
    std::raise(SIGKILL);
  }
  int before = 0;
  world.recv(2, 1, before);
  bool saw_loss = false;
  const auto start = commx::clock::now();
  try {
    int never = 0;
    world.recv(2, 2, never, 30s);
  } catch (const commx::error& e) {
    saw_loss = e.code() == commx::errc::peer_lost;
    fmt::print(
        "rank {}: {} after {} ms\n", world.rank(), e.what(),
        std::chrono::duration_cast<std::chrono::milliseconds>(commx::clock::now() - start).count());
  }
  const std::vector<int> lost = world.known_lost();
  int ok = before == 7 && saw_loss && lost == std::vector<int>{2} ? 1 : 0;
  if (world.rank() == 1) {
    world.send(0, 3, ok);
    return ok == 1 ? 0 : 1;
  }
  int theirs = 0;
  world.recv(1, 3, theirs, 30s);
  if (ok == 1 && theirs == 1) fmt::print("both survivors saw rank 2 lost\n");
  std::fflush(stdout);
  return ok == 1 && theirs == 1 ? 0 : 1;
}
