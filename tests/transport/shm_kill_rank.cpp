// SPDX-License-Identifier: MIT
// A job for shm_test under commxrun: rank 1 kills itself with SIGKILL, either before it joins
// (rank 0 has created the segment and waits: only commxrun can remove its name) or in the
// middle of an exchange. Rank 1 prints the segment's name so the test can look for it.
//
//   commxrun -n 3 shm_kill_rank at-start|mid-exchange

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <fmt/format.h>

#include "commx/bootstrap.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/shm.hpp"

namespace {

// Waits (at most 30 s, woken by inotify, not by polling) until /dev/shm/<name> exists.
bool await_segment(const std::string& name) {
  const int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0 || ::inotify_add_watch(fd, "/dev/shm", IN_CREATE | IN_MOVED_TO) < 0) return false;
  const std::string path = "/dev/shm" + name;
  for (int round = 0; round < 3000; ++round) {
    if (::access(path.c_str(), F_OK) == 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      char events[4096];
      (void)!::read(fd, events, sizeof events);
    }
  }
  ::close(fd);
  return ::access(path.c_str(), F_OK) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const bool at_start = std::strcmp(argv[1], "at-start") == 0;
  const auto env = commx::bootstrap::from_env();
  const std::string name = commx::detail::shm::segment_name("commx:" + env.token.value_or(""));
  if (env.rank == 1) {
    fmt::print("segment {}\n", name);
    std::fflush(stdout);
  }
  // Killed while rank 0 waits in a segment it created: only commxrun can remove the name.
  if (env.rank == 1 && at_start) {
    if (!await_segment(name)) return 3;
    std::raise(SIGKILL);
  }
  auto world = commx::communicator<commx::transport::shm>::from_env();
  if (env.rank == 1) {
    world.send(0, 1, 1);
    std::raise(SIGKILL);
  }
  int value = 0;
  world.recv(1, 1, value);
  world.recv(1, 2, value);  // never sent: commxrun stops this rank, or it sees peer_lost
  return 1;
}
