// SPDX-License-Identifier: MIT
// How much of an allreduce a nonblocking one hides behind computation, in the manner of
// IMB-NBC: t_pure is the blocking allreduce; t_ovrl is iallreduce started, then t_pure of
// computation, then wait. overlap = (t_pure + t_cpu - t_ovrl) / t_pure, clamped to [0, 1].
// Two kinds of computation: one that never calls commx ("silent"), and one that tests the
// request every 20 us ("testing"), as an application that knows it should does. Also the
// start-and-wait time with nothing between (what the nonblocking form costs over blocking).
// commx_add_variants builds bench_nbc_overlap_<stack>_<policy>; mpi_nbc_overlap_bench.cpp is
// the same measurement in raw MPI calls.
//   commxrun -n 2 ./bench_nbc_overlap_shm_binomial [rounds]
// Rank 0 prints one line per size: target, bytes, medians in microseconds, overlaps.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <commx/ops.hpp>
#include <commx/variant.hpp>

#include "overlap_timing.hpp"

namespace {

using comm = commx::variant::communicator;
using namespace overlap_timing;

struct figures {
  double pure, start_wait, silent, testing;
};

figures measure(comm& world, std::size_t elements, int iterations) {
  std::vector<double> data(elements, 1.0);
  std::vector<double> pure, start_wait, silent, testing;
  for (int i = 0; i < iterations; ++i) {
    world.barrier();
    auto t0 = steady::now();
    world.allreduce(data, std::plus<>{});
    pure.push_back(micros(steady::now() - t0));
  }
  // Every rank computes for the same time: the slowest rank's median.
  const double t_cpu = world.allreduce_value(median(pure), commx::op::max{});
  for (int i = 0; i < iterations; ++i) {
    world.barrier();
    auto t0 = steady::now();
    auto req = world.iallreduce(data, std::plus<>{});
    req.wait();
    start_wait.push_back(micros(steady::now() - t0));

    world.barrier();
    t0 = steady::now();
    req = world.iallreduce(data, std::plus<>{});
    compute(t_cpu, [] {});
    req.wait();
    silent.push_back(micros(steady::now() - t0));

    world.barrier();
    t0 = steady::now();
    req = world.iallreduce(data, std::plus<>{});
    compute(t_cpu, [&] { (void)req.test(); });
    req.wait();
    testing.push_back(micros(steady::now() - t0));
  }
  return {t_cpu, median(start_wait), median(silent), median(testing)};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
  auto world = comm::from_env();
  if (world.rank() == 0) {
    fmt::print("{:<34} {:>9} {:>10} {:>13} {:>8} {:>9}\n", "target", "bytes", "pure_us",
               "start_wait_us", "silent%", "testing%");
  }
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10, std::size_t{1} << 20}) {
      const int iterations = bytes >= (std::size_t{1} << 20) ? 100 : bytes > 8 ? 500 : 2000;
      const figures f = measure(world, bytes / sizeof(double), iterations);
      if (world.rank() == 0) {
        fmt::print("{:<34} {:>9} {:>10.2f} {:>13.2f} {:>8.0f} {:>9.0f}\n",
                   commx::variant::target_name, bytes, f.pure, f.start_wait,
                   100 * overlap(f.pure, f.silent), 100 * overlap(f.pure, f.testing));
      }
    }
  }
  return 0;
}
