// SPDX-License-Identifier: MIT
// The smallest commx application, built by the packaging tests once per stack: every rank checks
// the sum of ranks, so a job that runs but computes wrong fails too. inproc runs its ranks as
// threads (COMMX_INPROC_RANKS), simgrid as simulated actors (COMMX_SIMGRID_RANKS); the other
// stacks are started by commxrun or mpirun.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "commx/variant.hpp"

int main() {
  std::atomic<bool> right = true;  // inproc's ranks are threads
  commx::run<commx::variant::communicator>([&](auto& world) {
    const int n = world.size();
    const int total = world.allreduce_value(world.rank(), std::plus<>{});
    if (total != n * (n - 1) / 2) right = false;
    if (world.rank() == 0) {
      std::printf("%.*s: sum of ranks 0..%d = %d\n",
                  static_cast<int>(commx::variant::target_name.size()),
                  commx::variant::target_name.data(), n - 1, total);
    }
  });
  return right ? EXIT_SUCCESS : EXIT_FAILURE;
}
