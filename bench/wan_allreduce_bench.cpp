// SPDX-License-Identifier: MIT
// An allreduce across sites, for bench/wan/wan_allreduce.py: one job of ranks at two sites
// (COMMX_SITE) joined by the emulated wide-area link, the same stack for every policy: wan, or
// the layered shm+tcp+wan (bench_wan_allreduce_shm_tcp_wan).
//
//   bench_wan_allreduce <hierarchical|binomial|ring> <MiB> <calls>
//
// One unmeasured call, then `calls` measured ones, each started together after a barrier; a
// call's time is the slowest rank's. Rank 0 prints one line: the median and minimum call time
// and the payload bytes that crossed between sites per call (every rank's bytes_sent_to peers
// at another site, summed), which the script sets beside the time one wide-area exchange of
// the message needs.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/communicator.hpp"
#include COMMX_BENCH_TRANSPORT_HEADER

namespace {

template <class Policy>
int run(std::size_t bytes, int calls) {
  using comm = commx::communicator<commx::transport::COMMX_BENCH_TRANSPORT, Policy>;
  comm world = comm::from_env();
  const auto& endpoint = world.transport();
  const auto crossed = [&] {
    std::uint64_t sum = 0;
    for (int peer = 0; peer < world.size(); ++peer) {
      if (endpoint.site_of(peer) != endpoint.site_of(world.rank()))
        sum += endpoint.bytes_sent_to(peer);
    }
    return sum;
  };
  std::vector<double> data(bytes / sizeof(double), 1.0);
  world.allreduce(std::span(data), std::plus<>{});  // warm-up: connections, streams, windows
  std::uint64_t bytes_across = 0;
  std::vector<double> seconds;
  for (int i = 0; i < calls; ++i) {
    world.barrier();
    const std::uint64_t before = crossed();
    const auto start = std::chrono::steady_clock::now();
    world.allreduce(std::span(data), std::plus<>{});
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bytes_across += crossed() - before;
    world.allreduce(took, commx::op::max{});
    seconds.push_back(took);
  }
  world.allreduce(bytes_across, std::plus<>{});
  double expected = 1.0;  // every call multiplies each element by the rank count
  for (int i = 0; i <= calls; ++i) expected *= world.size();
  if (data.front() != expected || data.back() != expected) {
    std::fprintf(stderr, "rank %d: wrong sum %g\n", world.rank(), data.front());
    return 1;
  }
  if (world.rank() == 0) {
    std::ranges::sort(seconds);
    std::printf(
        "wan_allreduce policy=%s bytes=%zu ranks=%d calls=%d median_s=%.4f min_s=%.4f "
        "crossed_per_call=%.0f\n",
        Policy::name.data(), bytes, world.size(), calls, seconds[seconds.size() / 2],
        seconds.front(), static_cast<double>(bytes_across) / calls);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s hierarchical|binomial|ring MiB calls\n", argv[0]);
    return 2;
  }
  const std::string_view policy = argv[1];
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10) << 20;
  const int calls = std::atoi(argv[3]);
  if (bytes == 0 || calls < 1) {
    std::fprintf(stderr, "MiB and calls must be positive\n");
    return 2;
  }
  if (policy == "hierarchical") return run<commx::coll::hierarchical>(bytes, calls);
  if (policy == "binomial") return run<commx::coll::binomial>(bytes, calls);
  if (policy == "ring") return run<commx::coll::ring>(bytes, calls);
  std::fprintf(stderr, "unknown policy '%s'\n", argv[1]);
  return 2;
}
