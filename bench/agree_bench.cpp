// SPDX-License-Identifier: MIT
// What an agreement costs beside the collective it replaces when nothing fails: agree on a
// 4-byte value (op::min) against an allreduce of 4 bytes (binomial and tuned; tuned followed by
// a barrier, what a uniform agreement must do at least), every rank
// running the same fixed number of calls per iteration; rank 0 reports the slowest rank's time
// per call (IMB's t_max). ULFM's published agreement costs about 2.8 small allreduces. Take
// the median of repetitions: the first benchmark a process times (agree) runs cold, 1.2-1.5x its
// warm time at shm's 2 ranks, and 5 ms of untimed calls first (pmb.hpp's warm-up) did not
// cover that (100 ms of barriers did).
//
//   commxrun -n 8 ./bench_agree_shm --benchmark_repetitions=5

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <commx/coll/binomial.hpp>
#include <commx/coll/tuned.hpp>
#include <commx/ops.hpp>
#include <commx/variant.hpp>

#include "pmb.hpp"

namespace {

using world_comm = commx::variant::communicator;
constexpr int calls_per_iteration = 200;

// Times `call` on every rank; the iteration's time is the slowest rank's.
template <class Call>
void time_calls(benchmark::State& state, world_comm& world, Call call) {
  for (auto _ : state) {
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls_per_iteration; ++i) call(i);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    world.allreduce(seconds, commx::op::max{});
    state.SetIterationTime(seconds / calls_per_iteration);
  }
}

void register_all(world_comm& world) {
  const std::string np = fmt::format("np{}", world.size());
  const std::string_view stack = world_comm::transport_type::name;
  auto add = [&](const std::string& name, auto body) {
    benchmark::RegisterBenchmark(name.c_str(), body)
        ->UseManualTime()
        ->Iterations(50)
        ->Unit(benchmark::kMicrosecond);
  };
  add(fmt::format("Agree/commx-{}/{}/4", stack, np), [&world](benchmark::State& state) {
    time_calls(state, world, [&](int i) {
      benchmark::DoNotOptimize(world.agree(world.rank() + i, commx::op::min{}).value);
    });
  });
  add(fmt::format("Allreduce/commx-{}-binomial/{}/4", stack, np),
      [&world](benchmark::State& state) {
        auto binomial = world.with_collectives<commx::coll::binomial>();
        time_calls(state, world, [&](int i) {
          benchmark::DoNotOptimize(binomial.allreduce_value(world.rank() + i, commx::op::min{}));
        });
      });
  add(fmt::format("Allreduce/commx-{}-tuned/{}/4", stack, np), [&world](benchmark::State& state) {
    auto tuned = world.with_collectives<commx::coll::tuned>();
    time_calls(state, world, [&](int i) {
      benchmark::DoNotOptimize(tuned.allreduce_value(world.rank() + i, commx::op::min{}));
    });
  });
  // What a uniform agreement must do at least: learn the outcome, then hold every rank until
  // all hold it (agreement.hpp).
  add(fmt::format("Allreduce/commx-{}-tuned+barrier/{}/4", stack, np),
      [&world](benchmark::State& state) {
        auto tuned = world.with_collectives<commx::coll::tuned>();
        time_calls(state, world, [&](int i) {
          benchmark::DoNotOptimize(tuned.allreduce_value(world.rank() + i, commx::op::min{}));
          tuned.barrier();
        });
      });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    world_comm world = world_comm::from_env();
    register_all(world);
    pmb::run_on_every_rank(world.rank(), argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", commx::variant::target_name, e.what());
    return 1;
  }
}
