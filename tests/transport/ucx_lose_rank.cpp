// SPDX-License-Identifier: MIT
// A job of 3 ranks on transport::ucx under commxrun --keep-going: rank 2 sends each survivor
// its pid and then kills itself (SIGKILL), or, given `stop`, stops itself (SIGSTOP). Each
// survivor must receive that message (sent before), then see a receive from rank 2 end within
// its deadline: with errc::peer_lost and rank 2 among known_lost() when it was killed, with
// errc::timeout and nobody lost when it was stopped (a stopped process still holds its
// connections: only the deadline can tell). Rank 1 tells rank 0 what it saw, which also shows
// the survivors still talk; rank 0 prints the verdict the test looks for and, for `stop`, kills
// rank 2. On one node a loss is found by watching the process (UCX's shared memory has no peer
// error handling); on three (--nodes 3) by UCX's own error handling over TCP.

#include <signal.h>
#include <sys/types.h>

#include <csignal>
#include <cstdio>
#include <string_view>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/ucx.hpp"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const bool stop = argc > 1 && std::string_view(argv[1]) == "stop";
  auto world = commx::communicator<commx::transport::ucx>::from_env();
  if (world.size() != 3) return 2;
  world.barrier();
  if (world.rank() == 2) {
    const long pid = ::getpid();
    world.send(0, 1, pid);
    world.send(1, 1, pid);
    std::raise(stop ? SIGSTOP : SIGKILL);
    return 3;  // resumed: the test failed to end this rank
  }
  long pid = 0;
  world.recv(2, 1, pid);
  commx::errc ended = {};
  const auto start = commx::clock::now();
  try {
    int never = 0;
    world.recv(2, 2, never, stop ? 3s : 30s);
  } catch (const commx::error& e) {
    ended = static_cast<commx::errc>(e.code().value());
    fmt::print(
        "rank {}: {} after {} ms\n", world.rank(), e.what(),
        std::chrono::duration_cast<std::chrono::milliseconds>(commx::clock::now() - start).count());
  }
  const std::vector<int> lost = world.known_lost();
  const bool as_expected = stop ? ended == commx::errc::timeout && lost.empty()
                                : ended == commx::errc::peer_lost && lost == std::vector<int>{2};
  int ok = pid > 0 && as_expected ? 1 : 0;
  if (world.rank() == 1) {
    world.send(0, 3, ok);
    return ok == 1 ? 0 : 1;
  }
  int theirs = 0;
  world.recv(1, 3, theirs, 30s);
  if (stop && pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
  if (ok == 1 && theirs == 1) {
    fmt::print("both survivors saw rank 2 {}\n", stop ? "time out" : "lost");
  }
  std::fflush(stdout);
  return ok == 1 && theirs == 1 ? 0 : 1;
}
