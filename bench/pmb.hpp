// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The Pallas/IMB benchmark set (seed 002) as both bench drivers run it, so that commx and raw
/// MPI are measured on the same sizes with the same repetition counts and names.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace pmb {

/// Bytes per rank: 0 B to 4 MiB. 256 KiB is not IMB's: without it a tuned table's rule from the
/// 64 KiB point ran to 1 MiB untested, and the MD example's 768 KiB force sum fell inside.
inline constexpr std::array<std::size_t, 8> sizes{0,     8,      1024,    16384,
                                                  65536, 262144, 1048576, 4194304};

inline constexpr std::array<std::string_view, 12> collectives{
    "PingPong",       "PingPing",  "Sendrecv",   "Exchange", "Allreduce", "Reduce",
    "Reduce_scatter", "Allgather", "Allgatherv", "Alltoall", "Bcast",     "Barrier"};

/// The point-to-point patterns run on 2 ranks, as in IMB.
constexpr bool two_ranks_only(std::string_view name) {
  return name == "PingPong" || name == "PingPing";
}

/// The patterns that run no collective: no policy is involved.
constexpr bool point_to_point(std::string_view name) {
  return two_ranks_only(name) || name == "Sendrecv" || name == "Exchange";
}

/// The root of a rooted pattern's next call (Reduce, Bcast): it turns round-robin, call after
/// call, as in IMB. A fixed root lets it run ahead by several calls while the others still
/// receive, which measures how many calls a tree keeps in flight, not how long one takes: with
/// root 0 fixed, flat's 8 B bcast won PMB's table at 16 ranks, and took 1.5x binomial's time
/// where roots turn (bench/scale_bench.cpp).
inline int next_root(int& calls, int ranks) {
  const int root = calls % ranks;
  calls = root + 1;
  return root;
}

/// Calls `f(bench, bytes)` for every point of the set, in the order the drivers run them.
template <class F>
void for_each_point(F&& f) {
  for (std::string_view bench : collectives) {
    for (std::size_t bytes : sizes) {
      if (bench == "Barrier" && bytes != 0) continue;
      f(bench, bytes);
    }
  }
}

/// Calls `f(bench, bytes, turn)` for every point of the set, `turn` counting the points from
/// PMB_ROUND (scripts/pmb_sweep.py sets it to the round's number): the drivers start each
/// point's policies at `turn` modulo their count. A policy always first or always last in its
/// point met the machine in the same state every time: at 4 ranks on 2 cores, tuned, last,
/// came out at 0.14 us for an 8-byte broadcast that flat, first, did in 0.07, on the very
/// algorithm flat runs.
template <class F>
void for_each_point_turning(F&& f) {
  const char* text = std::getenv("PMB_ROUND");  // NOLINT(concurrency-mt-unsafe)
  std::size_t turn = text != nullptr ? static_cast<std::size_t>(std::max(0, std::atoi(text))) : 0;
  for_each_point([&](std::string_view bench, std::size_t bytes) { f(bench, bytes, turn++); });
}

/// Calls `one(index)` for index 0..count-1, starting at `turn` modulo `count`.
template <class F>
void in_turn(std::size_t count, std::size_t turn, F&& one) {
  for (std::size_t k = 0; k < count; ++k) one((turn + k) % count);
}

/// How long a measurement's pattern runs before it is timed. The first policy measured at a
/// point came out slowest at 8 bytes in 5 of 6 runs (0.17-0.26 us where the others took
/// 0.06-0.15), whichever policy it was, and so did the next less so: the VM takes some
/// milliseconds to come back up to speed after the point before. One untimed call, or a hundred,
/// did not cover that; a few milliseconds do.
inline constexpr std::chrono::milliseconds warm_up_time{5};
/// The least a measurement times: `repetitions` calls of an 8-byte collective on shm take
/// 0.1 ms, within which one descheduling moves the figure by tens of percent.
inline constexpr std::chrono::milliseconds least_timed{2};

/// Runs `call` in batches of 10 until rank 0 has spent `warm_up_time` on it, then returns how
/// many calls to time: `reps`, or as many as fill `least_timed` at the warm-up's pace where
/// that is more (at most 100,000). `agree(value)` broadcasts rank 0's `value` (an int) to every
/// rank, after each batch and for the count, so all ranks make the same calls.
template <class Call, class Agree>
int warm_up(Call&& call, Agree&& agree, bool is_root, int reps) {
  const auto start = std::chrono::steady_clock::now();
  long calls = 0;
  for (int batch = 0; batch < 10000; ++batch) {  // bounded: rank 0 stops it far sooner
    for (int i = 0; i < 10; ++i) call();
    calls += 10;
    int more = is_root && std::chrono::steady_clock::now() - start < warm_up_time ? 1 : 0;
    agree(more);
    if (more == 0) break;
  }
  int timed = reps;
  if (is_root) {
    const double per_call =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(calls);
    const double fill = std::chrono::duration<double>(least_timed).count() / per_call;
    timed = static_cast<int>(std::clamp(fill, static_cast<double>(reps), 100000.0));
  }
  agree(timed);
  return timed;
}

/// PMB_FRESH_INPUT=1: each call's input is written just before the call, untimed, as an
/// application that computes its data every step has it. PMB's loop sends the same unchanged
/// buffers call after call, so a single-copy transfer (cma) reads them from the receiver's own
/// cache after the first call; here the sender has just written every line. Each call is timed
/// on its own (two clock reads, tens of nanoseconds): meant for the large sizes.
inline bool fresh_input() {
  static const bool on = [] {
    const char* text = std::getenv("PMB_FRESH_INPUT");  // NOLINT(concurrency-mt-unsafe)
    return text != nullptr && std::string_view(text) == "1";
  }();
  return on;
}

/// Seconds per call over `reps` calls of `call`; under fresh_input(), `write_input()` runs
/// before each call, outside the time.
template <class Call, class WriteInput>
double seconds_per_call(int reps, Call&& call, WriteInput&& write_input) {
  using clock = std::chrono::steady_clock;
  if (!fresh_input()) {
    const auto start = clock::now();
    for (int i = 0; i < reps; ++i) call();
    return std::chrono::duration<double>(clock::now() - start).count() / reps;
  }
  clock::duration calls{};
  for (int i = 0; i < reps; ++i) {
    write_input();
    const auto start = clock::now();
    call();
    calls += clock::now() - start;
  }
  return std::chrono::duration<double>(calls).count() / reps;
}

/// The fewest calls a measurement times: enough for small messages, few for large ones
/// (warm_up may ask for more).
constexpr int repetitions(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(
      (std::size_t{1} << 22) / std::max<std::size_t>(bytes, 4096), 5, 1000));
}

/// Rank count for the collectives: PMB_RANKS, default 4.
inline int ranks() {
  const char* text = std::getenv("PMB_RANKS");  // NOLINT(concurrency-mt-unsafe)
  return text != nullptr ? std::max(2, std::atoi(text)) : 4;
}

/// "<bench>/<stack>/np<ranks>/<bytes>", the name both drivers report.
inline std::string name(std::string_view bench, std::string_view stack, int ranks,
                        std::size_t bytes) {
  return std::string(bench) + "/" + std::string(stack) + "/np" + std::to_string(ranks) + "/" +
         std::to_string(bytes);
}

/// How every PMB measurement runs: one timed job per repetition, the same on every rank (Google
/// Benchmark's adaptive iteration counts would differ between ranks and deadlock them), its
/// manual time the slowest rank's per call; medians of 3 repetitions.
inline void configure(benchmark::internal::Benchmark* b) {
  b->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(true)->UseManualTime()->Unit(
      benchmark::kMicrosecond);
}

/// The counters every PMB measurement reports.
inline void label(benchmark::State& state, std::size_t bytes, int ranks) {
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["ranks"] = ranks;
}

/// Runs the registered benchmarks on every rank of a multi-process job; rank 0 alone reports
/// and writes --benchmark_out, the others run the same benchmarks silently.
inline void run_on_every_rank(int rank, int argc, char** argv) {
  class silent_reporter : public benchmark::BenchmarkReporter {
   public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  };
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0) {
    std::erase_if(
        args, [](const char* arg) { return std::string_view(arg).starts_with("--benchmark_out"); });
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
}

}  // namespace pmb
