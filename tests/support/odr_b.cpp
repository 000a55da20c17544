// SPDX-License-Identifier: MIT
#include "commx/commx.hpp"
#include "commx/transport/shm.hpp"  // header-only too: no duplicate symbols

int run_in_b() {
  int total = 0;
  commx::run_inproc(3, [&](auto& world) {
    int one = 1;
    world.allreduce(one, std::plus<>{});
    if (world.rank() == 0) total = one;
  });
  return total;
}
