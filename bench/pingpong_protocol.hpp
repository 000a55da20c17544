// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What pingpong_bench.cpp (commx, any stack) and mpi_pingpong_bench.cpp (raw MPI) share, so
/// their figures compare: the sizes, the window, and the run descriptor rank 0 sends rank 1
/// before each timed run. Knowing the run's shape, rank 1 posts exactly the receives it needs
/// into a buffer of the right size: neither side probes or resizes inside the timed loop. Rank 1
/// answers the descriptor with an empty control message once its buffers exist, so the first
/// touch of their pages is never timed (at 4 MiB the window's 256 MiB took longer to fault in
/// than a whole run: one cold iteration was all Google Benchmark measured).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

namespace pingpong {

/// bandwidth: `window` messages in flight, each into a receive buffer of its own (window x size
/// bytes of destinations, 256 MiB at 4 MiB: past the caches). bandwidth_one_buffer: the same, but
/// every receive of the window lands in one buffer, as OSU's osu_bw does and as iperf3 reads
/// into one buffer; the messages of one connection arrive one after the other, so the receives
/// never write the buffer at the same time (MPI calls overlapping receive buffers erroneous,
/// though every MPI library handles it as OSU relies on).
enum class kind : std::int32_t { pingpong = 0, bandwidth = 1, stop = 2, bandwidth_one_buffer = 3 };

inline const char* label(kind what) {
  switch (what) {
    case kind::pingpong:
      return "pingpong";
    case kind::bandwidth:
      return "bandwidth";
    case kind::bandwidth_one_buffer:
      return "bandwidth-onebuf";
    case kind::stop:
      break;
  }
  return "stop";
}

/// The measurements, in the order they run.
inline constexpr kind measurements[] = {kind::pingpong, kind::bandwidth,
                                        kind::bandwidth_one_buffer};

struct run {
  kind what;
  std::int32_t unused;  // explicit padding: the descriptor travels as raw bytes
  std::int64_t bytes;
  std::int64_t iterations;
};

inline constexpr int control_tag = 1;
inline constexpr int data_tag = 0;
/// Messages in flight per bandwidth iteration (as OSU's osu_bw), then one zero-byte ack.
inline constexpr int window = 64;

/// 0 B, 8 B, then 1 KiB to 4 MiB in steps of 4.
inline void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(0)->Arg(8);
  for (std::int64_t bytes = 1024; bytes <= (std::int64_t{4} << 20); bytes *= 4) b->Arg(bytes);
}

/// Ping-pong reports the half round trip ("latency"), as PMB and OSU do.
inline void report(benchmark::State& state, kind what, std::int64_t bytes) {
  const auto iterations = static_cast<double>(state.iterations());
  if (what == kind::pingpong) {
    state.SetBytesProcessed(state.iterations() * 2 * bytes);
    // Seconds per half round trip: the inverse of a rate of two trips per iteration.
    state.counters["half_rtt"] = benchmark::Counter(
        iterations * 2, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  } else {
    state.SetBytesProcessed(state.iterations() * window * bytes);
  }
}

}  // namespace pingpong
