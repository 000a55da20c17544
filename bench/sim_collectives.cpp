// SPDX-License-Identifier: MIT
// commx's collectives on a simulated cluster (transport::simgrid), one policy per run, every
// cell of the study (sim_study.hpp) in one simulated job; bench/sim_scale.py runs it at 16 to
// 4,096 ranks beside smpi_collectives.cpp, the same calls in MPI under SMPI.
//   export COMMX_SIMGRID_RANKS=1024 COMMX_SIMGRID_PLATFORM=fat-tree COMMX_SIMGRID_COMPUTE=skip
//   ./bench_sim_collectives_simgrid tuned [--collectives allreduce,bcast] [--sizes 8,65536]
// Rank 0 prints a line per cell: its simulated time per call (sim_study.hpp), and for tuned the algorithm its
// cost model chose (from the platform's route cost: transport::simgrid's modelled_link).

#include <fmt/format.h>

#include <cstddef>
#include <cstdio>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <commx/coll/detail/cost_model.hpp>
#include <commx/ops.hpp>
#include <commx/variant_collectives.hpp>

#include "sim_study.hpp"

namespace {

constexpr int start_line_tag = 7;

// The study's collectives are named as commx::stats names them.
commx::stats::op stats_op(sim_study::collective c) {
  for (std::size_t i = 0; i < commx::stats::op_count; ++i) {
    const auto kind = static_cast<commx::stats::op>(i);
    if (commx::stats::name(kind) == sim_study::name(c)) return kind;
  }
  throw std::logic_error("a study collective commx::stats does not name");
}

template <class Comm>
void study(Comm& world, const sim_study::plan& plan) {
  using sim_study::collective;
  const int me = world.rank();
  const int p = world.size();
  const auto ranks = static_cast<std::size_t>(p);
  for (const auto& cell : sim_study::cells(plan)) {
    const collective c = cell.first;  // named, not bound: lambdas below capture it
    const std::size_t bytes = cell.second;
    const std::string skip = sim_study::skipped(plan, c, bytes, p);
    std::string algorithm{Comm::collectives_type::name};
    if (!skip.empty()) {
      if (me == 0) sim_study::print_cell("commx", c, bytes, p, 0, algorithm, skip);
      continue;
    }
    if constexpr (Comm::collectives_type::name == "tuned") {
      const auto route = world.transport().modelled_link();
      algorithm = commx::coll::detail::name(commx::coll::detail::cheapest(
          stats_op(c), p, bytes, {route.latency_us, route.us_per_byte}));
    }
    const std::size_t elements = bytes / sizeof(double) + (bytes % sizeof(double) != 0);
    std::vector<double> data(c == collective::barrier ? 0 : elements, 1.0);
    std::vector<double> gathered;
    if (c == collective::allgather || c == collective::alltoall) {
      gathered.resize(elements * ranks);
      if (c == collective::alltoall) data.assign(elements * ranks, 1.0);
    }
    std::array<std::byte, 1> token{};
    std::array<std::byte, 1> taken{};
    const double us = sim_study::time_cell(
        me, p, plan.calls,
        [&](int to, int from) {
          world.sendrecv(to, start_line_tag, std::span<const std::byte>(token), from,
                         start_line_tag, std::span(taken));
        },
        [] {
          return std::chrono::duration<double>(commx::clock::now().time_since_epoch()).count();
        },
        [&](int call) {
          switch (c) {
            case collective::barrier:
              return world.barrier();
            case collective::bcast:
              return world.bcast(std::span(data), (call + 1) % p);
            case collective::allreduce:
              return world.allreduce(std::span(data), std::plus<>{});
            case collective::allgather:
              return world.allgather(std::span<const double>(data), std::span(gathered));
            case collective::alltoall:
              return world.alltoall(std::span<const double>(data), std::span(gathered));
          }
        },
        [&](double mine) { return world.allreduce_value(mine, commx::op::min{}); },
        [&](double mine) { return world.allreduce_value(mine, commx::op::max{}); });
    if (me == 0) sim_study::print_cell("commx", c, bytes, p, us, algorithm, {});
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s POLICY [options]  (policies: %s)\n", argv[0],
                 commx::variant::collectives_names().c_str());
    return 2;
  }
  const sim_study::plan plan = sim_study::parse_args(argc, argv, 2);
  const auto ran = commx::variant::with_collectives(argv[1], [&]<class Collectives>() {
    using comm = commx::variant::communicator_with<Collectives>;
    commx::run<comm>([&](comm& world) { study(world, plan); });
    return 0;
  });
  if (!ran) {
    std::fprintf(stderr, "no policy called %s (built: %s)\n", argv[1],
                 commx::variant::collectives_names().c_str());
    return 2;
  }
  return 0;
}
