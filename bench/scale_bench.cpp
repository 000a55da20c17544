// SPDX-License-Identifier: MIT
// A job of N ranks as a new user tries one: start-up, then a barrier, allreduces of 8 B and
// 64 KiB, and broadcasts of 8 B from rotating roots; what each rank holds (descriptors,
// resident memory) at the end. commx_add_variants builds bench_scale_<stack>_<policy>;
// bench/scale.py runs it at 8 to 256 ranks beside Open MPI and MPICH (mpi_scale_bench.cpp is
// the same program in raw MPI calls).
//   commxrun -n 64 ./bench_scale_tcp_binomial [rounds]
// Rank 0 prints one line: ranks, start-up (the slowest rank's seconds from its process's start
// to the end of the first barrier), each collective's time per call from a common start
// (scale_probe::start_line; the slowest rank's mean, in microseconds), and the largest
// descriptor count and resident set of any rank.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <commx/ops.hpp>
#include <commx/variant.hpp>

#include "scale_probe.hpp"

namespace {

using comm = commx::variant::communicator;
using steady = std::chrono::steady_clock;
constexpr int start_line_tag = 7;

template <class Step>
double per_call_us(comm& world, int calls, Step&& step) {
  std::array<std::byte, 1> token{};
  std::array<std::byte, 1> taken{};
  scale_probe::start_line(world.rank(), world.size(), [&](int to, int from) {
    world.sendrecv(to, start_line_tag, std::span<const std::byte>(token), from, start_line_tag,
                   std::span(taken));
  });
  const auto t0 = steady::now();
  for (int i = 0; i < calls; ++i) step(i);
  const double mine = std::chrono::duration<double, std::micro>(steady::now() - t0).count() / calls;
  return world.allreduce_value(mine, commx::op::max{});
}

}  // namespace

int main(int argc, char** argv) {
  auto world = comm::from_env();
  world.barrier();
  const double started =
      world.allreduce_value(scale_probe::seconds_since_process_start(), commx::op::max{});
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;

  std::vector<double> small(1, 1.0);
  std::vector<double> large(64 * 1024 / sizeof(double), 1.0);
  const double allreduce_8 = per_call_us(world, rounds, [&](int) {
    small[0] = 1.0;
    world.allreduce(std::span(small), std::plus<>{});
  });
  const double allreduce_64k = per_call_us(world, std::max(rounds / 10, 1), [&](int) {
    world.allreduce(std::span(large), std::plus<>{});
  });
  const double bcast_8 =
      per_call_us(world, rounds, [&](int i) { world.bcast(std::span(small), i % world.size()); });
  // Every rank holds the last allreduce's sum, and every broadcast passed it on unchanged.
  const bool right = small[0] == double(world.size());
  const double fds =
      world.allreduce_value(double(scale_probe::open_descriptors()), commx::op::max{});
  const double rss = world.allreduce_value(scale_probe::resident_megabytes(), commx::op::max{});
  if (world.rank() == 0) {
    fmt::print(
        "{} ranks={} start_s={:.3f} allreduce8_us={:.1f} allreduce64k_us={:.1f} "
        "bcast8_us={:.1f} max_fds={:.0f} max_rss_mb={:.1f}{}\n",
        commx::variant::target_name, world.size(), started, allreduce_8, allreduce_64k, bcast_8,
        fds, rss, right ? "" : " WRONG");
  }
  return right ? 0 : 1;
}
