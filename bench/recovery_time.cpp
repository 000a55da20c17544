// SPDX-License-Identifier: MIT
// From a SIGKILL to the first collective completed on the shrunk communicator (issue 50's
// goal: under 50 ms at 8 ranks on shm and tcp). Every rank runs barriers; at the 100th the
// victim (the last rank) writes the time into FILE and kills itself with SIGKILL. The
// survivors see the loss in their barrier, revoke, shrink and run one barrier on what shrink
// returned; the new rank 0 prints how long each part took after the kill. steady_clock is
// the machine's monotonic clock, the same in every process.
//
//   commxrun -n 8 --keep-going bench_recovery_time_<stack> FILE
//
// Prints one line: "recovery kill_to_detect_ms=... kill_to_shrunk_ms=... kill_to_collective_ms=...
// survivors=7". bench/recovery_time.py runs it in interleaved rounds.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "commx/recovery.hpp"
#include "commx/variant.hpp"

namespace {

using comm = commx::variant::communicator;
using clock_type = std::chrono::steady_clock;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

double ms_between(long long from, long long to) { return static_cast<double>(to - from) / 1e6; }

int measure(comm& world, const std::string& file) {
  const int victim = world.size() - 1;
  constexpr int warm_barriers = 100;
  for (int i = 0; i < 10 * warm_barriers; ++i) {
    try {
      if (i == warm_barriers && world.rank() == victim) {
        std::ofstream(file) << now_ns() << '\n';  // closed, so on disk, before the kill
        std::raise(SIGKILL);
      }
      world.barrier();
    } catch (const commx::error& e) {
      if (!commx::calls_for_recovery(e)) throw;
      const long long detected = now_ns();
      world.revoke();
      comm team = world.shrink();
      const long long shrunk = now_ns();
      team.barrier();
      const long long done = now_ns();
      long long killed = 0;
      std::ifstream(file) >> killed;
      if (team.rank() == 0) {
        fmt::print(
            "recovery kill_to_detect_ms={:.3f} kill_to_shrunk_ms={:.3f} "
            "kill_to_collective_ms={:.3f} survivors={}\n",
            ms_between(killed, detected), ms_between(killed, shrunk), ms_between(killed, done),
            team.size());
        std::fflush(stdout);
      }
      return killed > 0 ? 0 : 1;
    }
  }
  fmt::print(stderr, "rank {}: no loss seen in {} barriers\n", world.rank(), 10 * warm_barriers);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: commxrun -n N --keep-going {} FILE\n", argv[0]);
    return 2;
  }
  int status = 0;
  commx::run<comm>([&](comm& world) { status = measure(world, argv[1]); });
  return status;
}
