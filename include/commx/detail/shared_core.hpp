// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How long a waiting rank keeps yielding its core before it sleeps, where the job's ranks
/// outnumber the cores (shm's waits, tcp's and wan's polls).
///
/// A yielding rank gets its core back once every other runnable rank there had a turn; a
/// sleeping one only when a sender wakes it: a system call on the sender's path, and at many
/// ranks to a core a queue of wake-ups. So a wait yields for 40 us per rank of its core, at
/// least 200 us: a dozen rounds of the core's queue (a turn costs some 3 us here), whatever its
/// length. Measured on shm (bench/HISTORY.md, 2026-11-29): at 128 and 256 ranks on 2 cores,
/// yielding 200 us made an 8-byte allreduce 1.4x and 2.2x slower than yielding 2 ms and 5 ms,
/// and yielding longer still gained nothing. Up to 16 ranks a core a wait once yielded 200 us
/// whatever their count, four rounds at 16 (bench/HISTORY.md, 2026-12-02): at 32 ranks on 2
/// cores a broadcast's ranks then slept about once a call, and 8-byte broadcasts from rotating
/// roots took 1.25x the time they take yielding 640 us (8 of 8 paired runs; the 8-byte
/// allreduce the same within the noise).

#include <algorithm>
#include <chrono>

namespace commx::detail {

/// Ranks a core holds from which a step that waits for another rank's turn costs more than
/// moving the bytes again: shm's large messages are read by cma, with no turn of their sender's
/// (transport/detail/shm/options.hpp), and binomial's allreduce goes in two waves instead of by
/// halves (coll/detail/two_waves.hpp). Measured on 2 cores (bench/HISTORY.md, 2026-11-29): the
/// 64 KiB allreduce at 16 to 256 ranks took 0.5-0.8x by halves' time that way; at 8 ranks
/// either way within the noise; at 4 ranks (2 to a core) cma took 1.1-1.3x copy's time in
/// PMB's large collectives.
inline constexpr int queued_core = 8;

/// Ranks per core of `ranks` on `cores` (rounded up).
inline constexpr int ranks_per_core(int ranks, int cores) {
  const int c = cores > 0 ? cores : 1;
  return (ranks + c - 1) / c;
}

/// The least a wait yields before it sleeps, and how much longer per rank of its core.
inline constexpr std::chrono::microseconds base_yield{200};
inline constexpr std::chrono::microseconds yield_per_rank{40};

/// How long a wait yields before it sleeps with `ranks` on `cores` (more ranks than cores).
inline std::chrono::microseconds yield_before_sleep(int ranks, int cores) {
  return std::max(base_yield, ranks_per_core(ranks, cores) * yield_per_rank);
}

/// How long a wait polls, yielding between polls, before it sleeps where its rank has a core of
/// its own. Open MPI and MPICH never sleep there: a sleeper's wake-up lands on the path of the
/// message that wakes it, and on a VM an idle vCPU is woken through the host (tens of us, at
/// times hundreds). A transfer of a few MiB keeps its sender waiting longer than that for the
/// receiver's copy (4 MiB over cma: ~0.5 ms here), so waits that slept after 200 us (shm) and
/// 100 us (tcp, ucx) paid a wake-up per transfer: a 4 MiB ping-pong took 1.30x Open MPI's time
/// on shm and 1.25x MPICH's on ucx's shared memory, 1.04x and 1.01x polling on (bench/HISTORY.md,
/// 2026-12-04, seventh entry). 2 ms covers such a transfer both ways and stays short of a time
/// slice; each poll yields, so a task that wants the core gets it.
inline constexpr std::chrono::microseconds own_core_wait{2000};

}  // namespace commx::detail
