// SPDX-License-Identifier: MIT
// The study's cells (sim_study.hpp) in MPI calls, for SimGrid's SMPI: built with smpicxx and
// run by smpirun on the same platform as sim_collectives.cpp, whose twin it is; SMPI's
// `smpi/coll-selector` (ompi or mpich) picks the algorithms as those libraries do.
//   smpirun -np 1024 -platform fat-tree.xml -hostfile hosts --cfg=smpi/coll-selector:ompi
//           --cfg=network/model:CM02 --cfg=smpi/simulate-computation:no
//           ./bench_smpi_collectives ompi [--collectives allreduce,bcast] [--sizes 8,65536]
// Rank 0 prints a line per cell, as sim_collectives does; the first argument names the side.

#include <mpi.h>

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "sim_study.hpp"

namespace {

constexpr int start_line_tag = 7;

double reduced(double mine, MPI_Op op) {
  double all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return all;
}

void study(const std::string& side, const sim_study::plan& plan) {
  using sim_study::collective;
  int me = 0;
  int p = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const auto ranks = static_cast<std::size_t>(p);
  for (const auto& cell : sim_study::cells(plan)) {
    const collective c = cell.first;  // named, not bound: lambdas below capture it
    const std::size_t bytes = cell.second;
    const std::string skip = sim_study::skipped(plan, c, bytes, p);
    if (!skip.empty()) {
      if (me == 0) sim_study::print_cell(side, c, bytes, p, 0, side, skip);
      continue;
    }
    const std::size_t elements = bytes / sizeof(double) + (bytes % sizeof(double) != 0);
    const int count = static_cast<int>(elements);
    std::vector<double> data(c == collective::barrier ? 0 : elements, 1.0);
    std::vector<double> out(c == collective::allreduce ? elements : 0);
    std::vector<double> gathered;
    if (c == collective::allgather || c == collective::alltoall) {
      gathered.resize(elements * ranks);
      if (c == collective::alltoall) data.assign(elements * ranks, 1.0);
    }
    std::array<char, 1> token{};
    std::array<char, 1> taken{};
    const double us = sim_study::time_cell(
        me, p, plan.calls,
        [&](int to, int from) {
          MPI_Sendrecv(token.data(), 1, MPI_CHAR, to, start_line_tag, taken.data(), 1, MPI_CHAR,
                       from, start_line_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        },
        [] { return MPI_Wtime(); },
        [&](int call) {
          switch (c) {
            case collective::barrier:
              MPI_Barrier(MPI_COMM_WORLD);
              break;
            case collective::bcast:
              MPI_Bcast(data.data(), count, MPI_DOUBLE, (call + 1) % p, MPI_COMM_WORLD);
              break;
            case collective::allreduce:
              MPI_Allreduce(data.data(), out.data(), count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
              break;
            case collective::allgather:
              MPI_Allgather(data.data(), count, MPI_DOUBLE, gathered.data(), count, MPI_DOUBLE,
                            MPI_COMM_WORLD);
              break;
            case collective::alltoall:
              MPI_Alltoall(data.data(), count, MPI_DOUBLE, gathered.data(), count, MPI_DOUBLE,
                           MPI_COMM_WORLD);
              break;
          }
        },
        [](double mine) { return reduced(mine, MPI_MIN); },
        [](double mine) { return reduced(mine, MPI_MAX); });
    if (me == 0) sim_study::print_cell(side, c, bytes, p, us, side, {});
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string side = argc > 1 ? argv[1] : "smpi";
  const sim_study::plan plan = sim_study::parse_args(argc, argv, 2);
  study(side, plan);
  MPI_Finalize();
  return 0;
}
