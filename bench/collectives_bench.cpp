// SPDX-License-Identifier: MIT
// The PMB/IMB set on commx: every collectives policy over the in-process stack, ranks as
// threads. Each benchmark is one job that times `pmb::repetitions` calls on every rank and
// reports the slowest rank's time per call (IMB's t_max), as manual time.
//
//   PMB_RANKS=4 ./bench_collectives --benchmark_out=commx.json --benchmark_out_format=json

#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/launch.hpp"
#include "commx/ops.hpp"
#include "pmb.hpp"
#include "pmb_pattern.hpp"

namespace {

// One point (a collective at one size) for one policy.
template <class Policy>
void register_point(std::string_view bench, std::size_t bytes) {
  using comm = commx::communicator<commx::transport::inproc, Policy>;
  const bool p2p = pmb::point_to_point(bench);
  if (p2p && Policy::name != commx::coll::flat::name) return;  // no policy involved
  const int ranks = pmb::two_ranks_only(bench) ? 2 : pmb::ranks();
  const std::string stack = p2p ? "commx-inproc" : "commx-inproc-" + std::string(Policy::name);
  benchmark::RegisterBenchmark(
      pmb::name(bench, stack, ranks, bytes).c_str(),
      [bench, bytes, ranks](benchmark::State& state) {
        const int least_reps = pmb::repetitions(bytes);
        for (auto _ : state) {
          std::atomic<double> slowest{0};  // per call, the slowest rank's
          commx::run_inproc<comm>(ranks, [&](comm& world) {
            pmb::commx_pattern work(bench, bytes, ranks);
            const int reps =
                pmb::warm_up([&] { work.run(world); }, [&](int& value) { world.bcast(value, 0); },
                             world.rank() == 0, least_reps);
            world.barrier();
            double per_call = pmb::seconds_per_call(
                reps, [&] { work.run(world); }, [&] { work.write_input(); });
            world.allreduce(per_call, commx::op::max{});
            if (world.rank() == 0) slowest = per_call;
          });
          state.SetIterationTime(slowest);
        }
        pmb::label(state, bytes, ranks);
      })
      ->Apply(pmb::configure);
}

// Point by point, every policy in turn, as bench_pmb_<stack> does (pmb_bench.cpp says why).
template <class... Policies>
void register_policies() {
  const std::array<void (*)(std::string_view, std::size_t), sizeof...(Policies)> each{
      &register_point<Policies>...};
  pmb::for_each_point_turning([&](std::string_view bench, std::size_t bytes, std::size_t turn) {
    pmb::in_turn(each.size(), turn, [&](std::size_t k) { each[k](bench, bytes); });
  });
}

}  // namespace

int main(int argc, char** argv) {
  register_policies<commx::coll::flat, commx::coll::binomial, commx::coll::ring,
                    commx::coll::hierarchical, commx::coll::tuned>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
