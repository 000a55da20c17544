// SPDX-License-Identifier: MIT
// scale_bench.cpp's job in raw MPI calls, for its side-by-side figures (bench/scale.py runs
// it under Open MPI's mpirun and MPICH's mpiexec at the same rank counts):
//   mpirun -np 64 --oversubscribe ./bench_mpi_scale [rounds]
// Prints the same line as scale_bench.cpp, named after the MPI library.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "scale_probe.hpp"

namespace {

using steady = std::chrono::steady_clock;
constexpr int start_line_tag = 7;

template <class Step>
double per_call_us(int calls, Step&& step) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  scale_probe::start_line(rank, size, [](int to, int from) {
    char token = 0;
    char taken = 0;
    MPI_Sendrecv(&token, 1, MPI_CHAR, to, start_line_tag, &taken, 1, MPI_CHAR, from, start_line_tag,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  });
  const auto t0 = steady::now();
  for (int i = 0; i < calls; ++i) step(i);
  double mine = std::chrono::duration<double, std::micro>(steady::now() - t0).count() / calls;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Barrier(MPI_COMM_WORLD);
  const double started = slowest(scale_probe::seconds_since_process_start());
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;

  std::vector<double> small(1, 1.0);
  std::vector<double> large(64 * 1024 / sizeof(double), 1.0);
  const double allreduce_8 = per_call_us(rounds, [&](int) {
    small[0] = 1.0;
    MPI_Allreduce(MPI_IN_PLACE, small.data(), 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  });
  const double allreduce_64k = per_call_us(std::max(rounds / 10, 1), [&](int) {
    MPI_Allreduce(MPI_IN_PLACE, large.data(), static_cast<int>(large.size()), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
  });
  const double bcast_8 = per_call_us(
      rounds, [&](int i) { MPI_Bcast(small.data(), 1, MPI_DOUBLE, i % size, MPI_COMM_WORLD); });
  const bool right = small[0] == double(size);
  const double fds = slowest(scale_probe::open_descriptors());
  const double rss = slowest(scale_probe::resident_megabytes());
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);
  const std::string name =
      std::string(library).find("Open MPI") != std::string::npos ? "openmpi" : "mpich";
  if (rank == 0) {
    std::printf(
        "bench_mpi_scale_%s ranks=%d start_s=%.3f allreduce8_us=%.1f "
        "allreduce64k_us=%.1f bcast8_us=%.1f max_fds=%.0f max_rss_mb=%.1f%s\n",
        name.c_str(), size, started, allreduce_8, allreduce_64k, bcast_8, fds, rss,
        right ? "" : " WRONG");
  }
  MPI_Finalize();
  return right ? 0 : 1;
}
