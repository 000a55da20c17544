// SPDX-License-Identifier: MIT
// pi by the midpoint rule, split among ranks: the smallest complete commx program.
// Rank 0 broadcasts the problem, every rank integrates its share of the intervals, a reduction
// sums the shares, and a gather collects each rank's share for the report.
//
//   COMMX_INPROC_RANKS=4 ./pi_inproc [intervals]     (in-process stack: ranks are threads)
//   commxrun -n 4 ./pi_<stack> [intervals]           (multi-process stacks)

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/variant.hpp"

namespace {

double integrate_share(long long intervals, int rank, int size) {
  const double width = 1.0 / static_cast<double>(intervals);
  double sum = 0;
  for (long long i = rank; i < intervals; i += size) {
    const double x = (static_cast<double>(i) + 0.5) * width;
    sum += 4.0 / (1.0 + x * x);
  }
  return sum * width;
}

}  // namespace

int main(int argc, char** argv) {
  long long requested = 10'000'000;
  if (argc > 1) {
    char* end = nullptr;
    requested = std::strtoll(argv[1], &end, 10);
    if (*end != '\0' || requested < 1) {
      std::fprintf(stderr, "usage: %s [intervals > 0]\n", argv[0]);
      return 2;
    }
  }
  try {
    commx::run<commx::variant::communicator>([&](auto& world) {
      long long intervals = world.rank() == 0 ? requested : 0;
      world.bcast(intervals, 0);
      const double share = integrate_share(intervals, world.rank(), world.size());
      double pi = share;
      world.reduce(pi, std::plus<>{}, 0);
      std::vector<double> shares(world.rank() == 0 ? static_cast<std::size_t>(world.size()) : 0);
      world.gather(share, shares, 0);
      world.barrier();
      if (world.rank() != 0) return;
      using policy = commx::variant::communicator::collectives_type;
      fmt::print("{} ({} over {}: {}): {} ranks, {} intervals\n", commx::variant::target_name,
                 world.transport().name, policy::name, policy::description, world.size(),
                 intervals);
      for (std::size_t r = 0; r < shares.size(); ++r)
        fmt::print("  rank {} share {:.15f}\n", r, shares[r]);
      fmt::print("pi ~= {:.15f} (error {:.3e})\n", pi, std::abs(pi - std::numbers::pi));
      fmt::print("rank 0's communication:\n{}", world.stats().report());
      if (std::abs(pi - std::numbers::pi) > 1e-6) throw std::runtime_error("pi is off");
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pi: %s\n", e.what());
    return 1;
  }
  return 0;
}
