// SPDX-License-Identifier: MIT
// A simulated job of COMMX_SIMGRID_RANKS ranks (transport::simgrid) as a program runs one,
// through commx::run: an allreduce of 8 KiB, broadcasts of 8 B from turning roots, an alltoall
// of 64 B per pair (unless the argument says `no-alltoall`: at 1,024 ranks its million
// concurrent flows cost SimGrid's bandwidth-sharing solver minutes) and a barrier, each result
// checked at every rank (or, with `send-time`, how long an eager and a waiting send take; with
// `compute`, what measured compute charges: simgrid_compute.sh).
// Rank 0 prints each phase's simulated seconds (commx::clock is the simulation's) and a digest
// of the results: with COMMX_SIMGRID_COMPUTE=skip two runs must print the same line
// (simgrid_determinism.sh).

#include <fmt/format.h>
#include <time.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "commx/coll/tuned.hpp"
#include "commx/communicator.hpp"
#include "commx/launch.hpp"
#include "commx/ops.hpp"
#include "commx/transport/simgrid.hpp"

namespace {

using comm = commx::communicator<commx::transport::simgrid, commx::coll::tuned>;

double seconds_since(commx::clock::time_point start) {
  return std::chrono::duration<double>(commx::clock::now() - start).count();
}

void expect(bool holds, int rank, const char* what) {
  if (!holds) throw std::runtime_error(fmt::format("rank {}: wrong {}", rank, what));
}

bool with_alltoall = true;

void job(comm& world) {
  const int me = world.rank();
  const int n = world.size();
  std::uint64_t digest = 0;

  auto start = commx::clock::now();
  std::vector<std::int64_t> sums(1024, me);
  world.allreduce(std::span(sums), std::plus<>{});
  const double allreduce_s = seconds_since(start);
  for (std::int64_t v : sums) expect(v == std::int64_t{n} * (n - 1) / 2, me, "allreduce");
  digest += static_cast<std::uint64_t>(sums.front());

  start = commx::clock::now();
  std::vector<std::int64_t> value(1);
  for (int call = 0; call < 10; ++call) {
    const int root = call % n;
    value[0] = me == root ? 1000 + root : -1;
    world.bcast(std::span(value), root);
    expect(value[0] == 1000 + root, me, "bcast");
    digest = digest * 31 + static_cast<std::uint64_t>(value[0]);
  }
  const double bcast_s = seconds_since(start);

  start = commx::clock::now();
  std::vector<std::int64_t> out(static_cast<std::size_t>(n) * 8);
  std::vector<std::int64_t> in(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = me * 1000000 + static_cast<int>(i / 8);
  if (with_alltoall) {
    world.alltoall(std::span<const std::int64_t>(out), std::span(in));
    for (std::size_t i = 0; i < in.size(); ++i) {
      expect(in[i] == static_cast<std::int64_t>(i / 8) * 1000000 + me, me, "alltoall");
    }
  }
  world.barrier();
  const double alltoall_s = seconds_since(start);
  digest = digest * 31 + static_cast<std::uint64_t>(in.back());

  if (me == 0) {
    std::printf("ranks=%d allreduce_s=%.9f bcast_s=%.9f alltoall_barrier_s=%.9f digest=%llu\n", n,
                allreduce_s, bcast_s, alltoall_s, static_cast<unsigned long long>(digest));
  }
}

// `send-time EAGER`: rank 0's blocking send of 1 KiB to the last rank ends at once when
// COMMX_SIMGRID_EAGER_BYTES lets 1 KiB go eagerly (EAGER is 1), and only once the transfer
// has crossed the route (at least its latency) when it does not (EAGER is 0, the default).
bool eager_sends = true;

void send_time(comm& world) {
  const int last = world.size() - 1;
  std::vector<std::byte> kib(1024, std::byte{7});
  if (world.rank() == 0) {
    const double latency_s = world.transport().modelled_link().latency_us * 1e-6;
    const auto start = commx::clock::now();
    world.send(last, 1, std::span<const std::byte>(kib));
    const double took = seconds_since(start);
    std::printf("send of 1 KiB took %.9f s (route latency %.9f s)\n", took, latency_s);
    expect(eager_sends ? took == 0.0 : took >= latency_s, 0, "send completion");
  } else if (world.rank() == last) {
    std::vector<std::byte> got(1024);
    world.recv(0, 1, std::span(got));
    expect(got == kib, last, "payload");
  }
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// `compute`: rank 0 burns 2 ms of its thread's CPU time before a barrier, and its measured
// compute grows by that (busy_s, the simulated time its barrier took, at least as much); then
// 100 allreduces of 1 KiB back to back with nothing between, across which the ranks' measured
// compute grows by little (mean_charged_s; simgrid_compute.sh): commx's own work inside
// and between a program's calls, and the readings of the clocks that measure compute, are not
// the program's compute (each transport call charged 1.2 us or more, and noise, before).
void compute_charge(comm& world) {
  world.barrier();
  auto start = commx::clock::now();
  double charged = world.transport().compute_seconds();
  if (world.rank() == 0) {
    const double until = thread_cpu_seconds() + 0.002;
    while (thread_cpu_seconds() < until) {
    }
  }
  world.barrier();
  const double busy_s = seconds_since(start);
  const double busy_charged_s = world.transport().compute_seconds() - charged;
  std::vector<double> values(128, 1.0);
  charged = world.transport().compute_seconds();
  start = commx::clock::now();
  constexpr int calls = 100;
  for (int call = 0; call < calls; ++call) world.allreduce(std::span(values), std::plus<>{});
  const double per_call_s = seconds_since(start) / calls;
  expect(values[0] == std::pow(double(world.size()), calls), world.rank(), "allreduce");
  const double mean_charged_s =
      world.allreduce_value(world.transport().compute_seconds() - charged, std::plus<>{}) /
      world.size();
  if (world.rank() == 0) {
    std::printf("busy_s=%.9f busy_charged_s=%.9f per_call_s=%.9f mean_charged_s=%.9f\n", busy_s,
                busy_charged_s, per_call_s, mean_charged_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  with_alltoall = !(argc > 1 && std::string_view(argv[1]) == "no-alltoall");
  try {
    if (argc > 2 && std::string_view(argv[1]) == "send-time") {
      eager_sends = std::string_view(argv[2]) == "1";
      commx::run<comm>(&send_time);
      return 0;
    }
    if (argc > 1 && std::string_view(argv[1]) == "compute") {
      commx::run<comm>(&compute_charge);
      return 0;
    }
    commx::run<comm>(&job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simgrid_job: %s\n", e.what());
    return 1;
  }
  return 0;
}
