// SPDX-License-Identifier: MIT
// Compiled to assembly twice by check_stats_cost.cmake, once per stats policy (STATS is
// defined on the command line), to compare what each policy puts on the send/receive path.
#include <vector>

#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"

using comm = commx::communicator<commx::transport::inproc, commx::coll::flat, commx::stats::STATS>;

void exercise(comm& world, std::vector<double>& data) {
  world.send(1, 0, data);
  world.recv(1, 0, data);
  world.bcast(data, 0);
}
