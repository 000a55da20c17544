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
  [[nodiscard]] bool meets(const cpu_words& other) const {
    for (std::size_t i = 0; i < words.size(); ++i) {
      if ((words[i] & other.words[i]) != 0) return true;
    }
    return false;
  }
};
static_assert(sizeof(cpu_words) == 128);

/// How crowded this rank's CPUs are: the ranks that may run on them (this one included) and
/// how many they are.
struct cpu_sharing {
  int ranks = 1;
  int cpus = 1;
};

/// How often a waiting rank looks at its peers' processes: `asked` (options::liveness_period),
/// or 1 ms per rank of a core where more crowd them, so that sleeping ranks wake for it some
/// 1,000 times a second per core at most. Each such wake-up costs a few system calls and a look
/// at every peer's queues: at 20 ms, 1,024 ranks on 2 cores woke 51,000 times a second, which
/// took the cores' whole time, and a token went round their ring at 85 ms a hop.
inline std::chrono::milliseconds liveness_period_for(std::chrono::milliseconds asked,
                                                     const cpu_sharing& sharing) {
  return std::max(asked, std::chrono::milliseconds(sharing.ranks / std::max(sharing.cpus, 1)));
}

/// The sharing of `mine` among the CPU sets of `ranks` ranks, `cpus_of(r)` giving rank r's
/// (this rank's among them).
template <class CpusOf>
cpu_sharing sharing_of(const cpu_words& mine, int ranks, CpusOf&& cpus_of) {
  cpu_sharing s{0, std::max(1, mine.count())};
  for (int r = 0; r < ranks; ++r) s.ranks += cpus_of(r).meets(mine) ? 1 : 0;
  s.ranks = std::max(s.ranks, 1);
  return s;
}

}  // namespace commx::detail::shm
