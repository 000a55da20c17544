// SPDX-License-Identifier: MIT
// nbc_overlap_bench.cpp's measurement in raw MPI calls (MPI_Allreduce, MPI_Iallreduce,
// MPI_Test every 20 us), for side-by-side ratios: mpirun -np 2 ./bench_mpi_nbc_overlap [rounds]

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "overlap_timing.hpp"

using namespace overlap_timing;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::printf("%-34s %9s %10s %13s %8s %9s\n", "target", "bytes", "pure_us", "start_wait_us",
                "silent%", "testing%");
  }
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10, std::size_t{1} << 20}) {
      const int iterations = bytes >= (std::size_t{1} << 20) ? 100 : bytes > 8 ? 500 : 2000;
      const int n = static_cast<int>(bytes / sizeof(double));
      std::vector<double> data(static_cast<std::size_t>(n), 1.0);
      std::vector<double> pure, start_wait, silent, testing;
      for (int i = 0; i < iterations; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = steady::now();
        MPI_Allreduce(MPI_IN_PLACE, data.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        pure.push_back(micros(steady::now() - t0));
      }
      double t_cpu = median(pure);
      MPI_Allreduce(MPI_IN_PLACE, &t_cpu, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      for (int i = 0; i < iterations; ++i) {
        MPI_Request req = MPI_REQUEST_NULL;
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = steady::now();
        MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        start_wait.push_back(micros(steady::now() - t0));

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = steady::now();
        MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        compute(t_cpu, [] {});
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        silent.push_back(micros(steady::now() - t0));

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = steady::now();
        MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        compute(t_cpu, [&] {
          int done = 0;
          MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        });
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        testing.push_back(micros(steady::now() - t0));
      }
      if (rank == 0) {
        std::printf("%-34s %9zu %10.2f %13.2f %8.0f %9.0f\n", "mpi_raw", bytes, t_cpu,
                    median(start_wait), 100 * overlap(t_cpu, median(silent)),
                    100 * overlap(t_cpu, median(testing)));
      }
    }
  }
  MPI_Finalize();
  return 0;
}
