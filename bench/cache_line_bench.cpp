// SPDX-License-Identifier: MIT
// The floor under any shared-memory message on this machine: how long one cache line takes to
// cross between two cores. Two threads, pinned to CPUs 0 and 1 (or PIN_CPUS="a,b"), hand a
// counter on one line back and forth; the half round trip is one crossing. Issue 20 sets shm's
// 8-byte half round trip against twice this bound; bench/shm_vs_mpi.sh prints it beside them.

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

// Two CPUs from PIN_CPUS ("a,b"), else 0 and 1.
std::pair<int, int> cpus() {
  const char* text = std::getenv("PIN_CPUS");  // NOLINT(concurrency-mt-unsafe): before threads
  int a = 0;
  int b = 1;
  if (text != nullptr && std::sscanf(text, "%d,%d", &a, &b) != 2) {  // NOLINT(cert-err34-c)
    a = 0;
    b = 1;
  }
  return {a, b};
}

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

void cache_line_pingpong(benchmark::State& state) {
  const auto [mine, theirs] = cpus();
  alignas(64) std::atomic<std::int64_t> line{0};
  std::atomic<bool> pinned{true};
  // The partner answers every odd value until it reads -1; each wait is bounded by the other
  // thread's next store, and the benchmark loop ends by storing -1.
  std::thread partner([&, other = theirs] {
    if (!pin(other)) pinned.store(false);
    for (std::int64_t seen = 0;;) {
      const std::int64_t now = line.load(std::memory_order_acquire);
      if (now < 0) return;
      if (now != seen && (now & 1) == 1) {
        seen = now + 1;
        line.store(seen, std::memory_order_release);
      }
    }
  });
  if (!pin(mine)) pinned.store(false);
  std::int64_t next = 1;
  for (auto _ : state) {
    line.store(next, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != next + 1) {
    }
    next += 2;
  }
  line.store(-1, std::memory_order_release);
  partner.join();
  if (!pinned.load()) state.SkipWithError("could not pin to the CPUs asked for (PIN_CPUS)");
  state.counters["half_rtt"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(cache_line_pingpong)->UseRealTime()->MinTime(0.2);

BENCHMARK_MAIN();
