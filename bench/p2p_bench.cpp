// SPDX-License-Identifier: MIT
// Point-to-point and collective microbenchmarks on the in-process stack, each run with
// stats::none and stats::counting side by side so that the cost of counting is a ratio.
//
// Ping-pong: rank 0 (the benchmark thread) sends, rank 1 (a helper thread) echoes.

#include <benchmark/benchmark.h>

#include <memory>
#include <thread>
#include <vector>

#include "commx/launch.hpp"

namespace {

constexpr int data_tag = 0;
constexpr int stop_tag = 1;

template <class Stats>
using comm = commx::communicator<commx::transport::inproc, commx::coll::flat, Stats>;

template <class Stats>
void ping_pong(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  auto hub =
      std::make_shared<commx::transport::inproc::hub>(2, commx::transport::inproc::hub_options{});
  std::jthread echo([hub, bytes] {
    comm<Stats> world(commx::transport::inproc(hub, 1));
    std::vector<char> buffer(bytes);
    for (;;) {
      const auto st = world.probe(0, commx::any_tag);
      if (st.tag == stop_tag) break;
      world.recv(0, data_tag, buffer);
      world.send(0, data_tag, buffer);
    }
  });
  comm<Stats> world(commx::transport::inproc(hub, 0));
  std::vector<char> out(bytes, 'x');
  std::vector<char> in(bytes);
  for (auto _ : state) {
    world.send(1, data_tag, out);
    world.recv(1, data_tag, in);
  }
  world.send(1, stop_tag, 0);
  state.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes) * state.iterations());
}

template <class Stats>
void allreduce(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const auto count = static_cast<std::size_t>(state.range(1));
  for (auto _ : state) {
    // One job per iteration would measure thread start-up; instead each job runs a fixed batch.
    state.PauseTiming();
    constexpr int batch = 50;
    state.ResumeTiming();
    commx::run_inproc<comm<Stats>>(ranks, [count](comm<Stats>& world) {
      std::vector<double> data(count, 1.0);
      for (int i = 0; i < batch; ++i) world.allreduce(data, std::plus<>{});
      benchmark::DoNotOptimize(data.data());
    });
  }
  state.counters["allreduces"] = benchmark::Counter(50.0 * static_cast<double>(state.iterations()),
                                                    benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(ping_pong<commx::stats::none>)
    ->Name("pingpong/inproc/none")
    ->RangeMultiplier(64)
    ->Range(8, 1 << 20)
    ->UseRealTime();
BENCHMARK(ping_pong<commx::stats::counting>)
    ->Name("pingpong/inproc/counting")
    ->RangeMultiplier(64)
    ->Range(8, 1 << 20)
    ->UseRealTime();
BENCHMARK(allreduce<commx::stats::none>)
    ->Name("allreduce/inproc/flat/none")
    ->Args({4, 1})
    ->Args({4, 4096})
    ->UseRealTime();
BENCHMARK(allreduce<commx::stats::counting>)
    ->Name("allreduce/inproc/flat/counting")
    ->Args({4, 1})
    ->Args({4, 4096})
    ->UseRealTime();

BENCHMARK_MAIN();
