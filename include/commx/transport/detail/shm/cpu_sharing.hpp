// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Whether a shm rank has a core of its own: how many of the segment's ranks may run on the
/// CPUs this one may run on.
///
/// Counting the job's ranks against this process's CPUs is right only while no rank is bound:
/// a launcher that binds each rank to a core of its own (`commxrun --bind-to core`, mpirun's
/// default at 2 ranks, srun's --cpu-bind=cores) leaves each process one CPU, and 2 ranks on
/// 1 CPU read as oversubscribed, so waits did not spin and large messages were held to the
/// crowded threshold (a 64 KiB ping-pong took 1.13x the time bound than unbound). So each rank
/// publishes its CPU set in the segment before it counts as arrived, and counts the ranks whose
/// sets meet its own: unbound ranks all meet (as before: the job against the CPUs), ranks bound
/// a core each meet only themselves, and ranks bound round a few cores meet their core's
/// others. 128 bytes a rank in the segment (CPUs 0-1023; a CPU beyond is taken as CPU 1023).
///
/// Counted once, the crowd is the ranks that may run there, not those that do: at 128 ranks on
/// 2 cores, with 126 of them asleep in a wait or gone, the other two still yielded at every
/// wait, and an 8-byte ping-pong between them took 2.8x a 2-rank job's time across two dies.
/// So where the sets partition the CPUs (every set that meets this rank's is the same set:
/// ranks unbound, bound a core each, or bound round a few cores), the ranks of a set count
/// those of them at rest (asleep on their futex, or gone) on a line of the segment kept for
/// the set's lowest rank (segment::rest_count; a rank that wakes a sleeper takes it off), and
/// a rank has a core of its own while no more of them are awake than the set has CPUs
/// (waiting.hpp). A count that is off (a rank killed while awake stays counted awake) errs
/// towards yielding; a wrong answer costs a spin of 50 us at most, never a message.

#include <sched.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace commx::detail::shm {

/// A set of CPUs as 16 words, as the segment holds it.
struct cpu_words {
  static constexpr int capacity = 1024;
  std::array<std::uint64_t, capacity / 64> words{};

  /// The CPUs this process may run on (its affinity: a container's cpuset, a launcher's
  /// binding); all of the first `fallback` if the kernel does not say.
  static cpu_words of_this_process(int fallback = 1) {
    cpu_words set;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (::sched_getaffinity(0, sizeof(mask), &mask) != 0) {
      for (int cpu = 0; cpu < std::clamp(fallback, 1, capacity); ++cpu) set.add(cpu);
      return set;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) set.add(std::min(cpu, capacity - 1));
    }
    return set;
  }

  void add(int cpu) { words[static_cast<std::size_t>(cpu / 64)] |= std::uint64_t{1} << (cpu % 64); }
  [[nodiscard]] int count() const {
    int n = 0;
    for (const std::uint64_t w : words) n += std::popcount(w);
    return n;
  }
  bool operator==(const cpu_words&) const = default;
  [[nodiscard]] bool meets(const cpu_words& other) const {
    for (std::size_t i = 0; i < words.size(); ++i) {
      if ((words[i] & other.words[i]) != 0) return true;
    }
    return false;
  }
};
static_assert(sizeof(cpu_words) == 128);

/// How crowded this rank's CPUs are: the ranks that may run on them (this one included) and
/// how many they are; and the lowest rank of those, where all of them have this rank's very
/// set (the rest count kept for it counts the ones at rest), else -1.
struct cpu_sharing {
  int ranks = 1;
  int cpus = 1;
  int group = -1;
};

/// How often a waiting rank looks at its peers' processes: `asked` (options::liveness_period),
/// or 4 ms per rank of a core where more crowd them, so that sleeping ranks wake for it some
/// 250 times a second per core at most. Each such wake-up costs two switches, some ten system
/// calls and a look at every sender's ring, 100-160 us on this project's VMs: at 20 ms, 1,024
/// ranks on 2 cores woke 51,000 times a second, which took the cores' whole time, and a token
/// went round their ring at 85 ms a hop; at 1 ms per rank, with 126 of 128 ranks on 2 cores
/// asleep, their wake-ups took 12% of each core, and a ping-pong between the other two, which
/// needs both running, 1.35-1.45x a 2-rank job's time (bench/HISTORY.md, twenty-second entry).
inline std::chrono::milliseconds liveness_period_for(std::chrono::milliseconds asked,
                                                     const cpu_sharing& sharing) {
  constexpr int ms_per_rank = 4;
  return std::max(
      asked, std::chrono::milliseconds(ms_per_rank * sharing.ranks / std::max(sharing.cpus, 1)));
}

/// The sharing of `mine` among the CPU sets of `ranks` ranks, `cpus_of(r)` giving rank r's
/// (this rank's among them).
template <class CpusOf>
cpu_sharing sharing_of(const cpu_words& mine, int ranks, CpusOf&& cpus_of) {
  cpu_sharing s{0, std::max(1, mine.count())};
  bool partial = false;  // a set that meets this one but is not it
  for (int r = 0; r < ranks; ++r) {
    const cpu_words& theirs = cpus_of(r);
    if (!theirs.meets(mine)) continue;
    ++s.ranks;
    if (theirs != mine) {
      partial = true;
    } else if (s.group < 0) {
      s.group = r;
    }
  }
  s.ranks = std::max(s.ranks, 1);
  if (partial) s.group = -1;
  return s;
}

}  // namespace commx::detail::shm
