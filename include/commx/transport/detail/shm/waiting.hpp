// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a waiting shm rank spends the time before it yields its core.
///
/// Spinning (polling the rings with a pause instruction between) answers a message within
/// nanoseconds, and costs nothing when the rank has a core of its own; when it shares one, the
/// spin takes the core from the very rank that would answer (measured on a loaded 2-core
/// machine: 64 pauses doubled the 8-byte latency). So the choice is made at run time:
/// - `COMMX_SHM_SPIN=auto` (the default): spin for up to `spin_budget` while this rank has a
///   core to itself: no more of the segment's ranks that may run on its CPUs are awake than
///   they are (cpu_sharing.hpp: those asleep or gone do not count), and no recent yield gave
///   the core to another task (one that took long and that the kernel counted as a switch did:
///   another job, or ranks of simulated nodes beyond this segment's). Otherwise
///   `shared_spins` pauses only.
/// - `COMMX_SHM_SPIN=n`: n pauses, whatever the host.
/// Where the core is shared, a wait spins only if a rank it receives from may run meanwhile:
/// not when every one of them is itself yielding or asleep (endpoint_departures.hpp).
/// Then the endpoint yields its core for a while (COMMX_SHM_YIELD_US, else 2 ms while the core
/// is its own and by how many ranks share a core where not: commx/detail/shared_core.hpp), and
/// then sleeps on its futex word.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "commx/deadline.hpp"
#include "commx/detail/shared_core.hpp"

namespace commx::detail::shm {

class waiting {
 public:
  /// Pauses a rank spins where its core is shared: the measured best on a loaded machine.
  static constexpr int shared_spins = 8;
  /// Polls of a glance while the core is the rank's own.
  static constexpr int glance_polls = 256;
  /// A yield that returns later than this, with a switch to another task counted by the
  /// kernel, ran a task that wants the core for long: the core is shared. A kernel thread's
  /// turn (tens of microseconds, some 100 a second on a VM's vCPU that takes its interrupts)
  /// does not make it so; a busy task keeps the core to the scheduler's next tick (1-4 ms).
  static constexpr clock::duration shared_yield = std::chrono::microseconds(200);
  /// How long one such yield keeps automatic spinning off.
  static constexpr clock::duration shared_memory = std::chrono::milliseconds(100);

  /// `fixed_spins`: COMMX_SHM_SPIN=n, or none for auto; `fixed_yield`: COMMX_SHM_YIELD_US, or
  /// none; `ranks` of the segment that may run on this rank's `cores`, and how many of them are
  /// at rest (`resting`, none where not counted: cpu_sharing.hpp; the endpoint counts them only
  /// where they outnumber the cores).
  waiting(std::optional<int> fixed_spins, clock::duration spin_budget,
          std::optional<std::chrono::microseconds> fixed_yield, int ranks,
          int cores = usable_cores(), const std::atomic<std::uint32_t>* resting = nullptr)
      : fixed_(fixed_spins),
        short_spins_(fixed_spins.value_or(shared_spins)),
        budget_(spin_budget),
        ranks_(ranks),
        cores_(cores),
        resting_(resting),
        yield_period_(fixed_yield.value_or(commx::detail::yield_before_sleep(ranks, cores_))),
        fixed_yield_(fixed_yield.has_value()) {}

  /// How long a waiting rank yields its core, turn after turn, before it sleeps: while the core
  /// is its own, own_core_wait (commx/detail/shared_core.hpp), else by how many share one.
  [[nodiscard]] clock::duration yield_period() const {
    return fixed_yield_ || !own_core() ? yield_period_ : own_core_period();
  }

  /// Cores this process may run on (its affinity mask; the online count if unknown).
  static int usable_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }

  /// Spins until `arrived()` (true) or the spin is over (false).
  template <class Arrived>
  bool spin(Arrived&& arrived, clock::time_point when) const {
    if (fixed_ || !own_core()) {
      for (int i = 0; i < short_spins_; ++i) {
        if (arrived()) return true;
        pause();
      }
      return false;
    }
    const clock::time_point until = std::min(when, clock::now() + budget_);
    for (unsigned turn = 0;; ++turn) {
      if (arrived()) return true;
      pause();
      // A clock read costs some 20 ns: once per 64 pauses keeps it out of the way.
      if ((turn & 63U) == 63U && clock::now() >= until) return false;
    }
  }

  /// A blocking call's first look: polls `arrived` a few times, reading no clock (most
  /// answers on a quiet node come within these polls).
  template <class Arrived>
  bool glance(Arrived&& arrived) const {
    const int polls = fixed_ ? *fixed_ : own_core() ? glance_polls : shared_spins;
    for (int i = 0; i < polls; ++i) {
      if (arrived()) return true;
      pause();
    }
    return false;
  }

  /// Called as a wait starts yielding: only the switches of its own yields count, not a kernel
  /// thread's turn while the rank computed (some 100 a second on this project's VMs).
  void start_yielding() {
    counting_switches_ = core_per_rank();
    if (counting_switches_) (void)switched_away();
  }

  /// Gives the core away once, and notes whether another task took it: only where the rank
  /// may have a core of its own now. Where more ranks that may run on its CPUs are awake than
  /// they are, it has none, and the two clock reads around the yield were some 5% of a 4-rank
  /// barrier's time on 2 cores (perf). The switches are counted from the first yield after
  /// the core became one's own: a count from before would blame this yield for older ones.
  void yield() {
    if (!core_per_rank()) {
      counting_switches_ = false;
      ::sched_yield();
      return;
    }
    if (!counting_switches_) {
      counting_switches_ = true;
      (void)switched_away();
    }
    const clock::time_point before = clock::now();
    ::sched_yield();
    const clock::time_point after = clock::now();
    if (after - before > shared_yield && switched_away()) shared_until_ = after + shared_memory;
  }

  /// What was chosen and why, for the log.
  [[nodiscard]] std::string describe() const {
    const auto us = [](clock::duration d) {
      return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    };
    const std::string then =
        (core_per_rank() || resting_ != nullptr) && !fixed_yield_
            ? fmt::format(
                  ", yields for {} us while its core is its own ({} us if not), then sleeps",
                  us(own_core_period()), us(yield_period_))
            : fmt::format(", yields for {} us, then sleeps", us(yield_period_));
    if (fixed_) {
      return fmt::format("spins {} times before yielding (COMMX_SHM_SPIN){}", *fixed_, then);
    }
    if (resting_ != nullptr) {
      return fmt::format(
          "spins up to {} us before yielding while no more of the {} ranks that may run on its {} "
          "cores are awake than these, else {} times{}",
          us(budget_), ranks_, cores_, shared_spins, then);
    }
    if (core_per_rank()) {
      return fmt::format(
          "spins up to {} us before yielding while its core is its own ({} ranks may run on its "
          "{} cores){}",
          us(budget_), ranks_, cores_, then);
    }
    return fmt::format("spins {} times before yielding ({} ranks may run on its {} cores){}",
                       shared_spins, ranks_, cores_, then);
  }

  /// Whether the automatic choice finds this rank's core shared now (COMMX_SHM_SPIN=n: never).
  [[nodiscard]] bool shares_core() const { return !fixed_ && !own_core(); }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
  }

 private:
  // Whether there is a usable core for every rank that may run on this one's and is awake:
  // only then may a rank have one of its own. One load where ranks are counted at rest.
  [[nodiscard]] bool core_per_rank() const {
    if (resting_ == nullptr) return ranks_ <= cores_;
    const auto at_rest = static_cast<int>(resting_->load(std::memory_order_relaxed));
    return ranks_ - std::min(at_rest, ranks_ - 1) <= cores_;
  }

  // Whether the kernel has switched this thread out for another task since the last look (an
  // involuntary switch: a yield that hands the core over counts as one; start_yielding looks
  // first). A late yield alone does not tell: on this project's VMs, with nothing else of the
  // guest runnable, some 400 yields a second took over 20 us (the host ran something else on
  // the vCPU), 1 in 80 of them with a switch; on a core shared with a busy task every late
  // yield had one. Looked at only after a late yield: a system call.
  bool switched_away() {
    rusage usage{};
    if (::getrusage(RUSAGE_THREAD, &usage) != 0) return true;
    const bool switched = usage.ru_nivcsw != involuntary_switches_;
    involuntary_switches_ = usage.ru_nivcsw;
    return switched;
  }

  // The yield period while the core is the rank's own.
  [[nodiscard]] clock::duration own_core_period() const {
    return std::max(yield_period_, clock::duration(commx::detail::own_core_wait));
  }

  // The clock is read only while a yield's verdict lasts, then the verdict is forgotten: kept,
  // every later wait of a rank that once yielded to another task (during an alltoall at 128
  // ranks) read the clock 3-4 times a receive to learn it was over (20-30 ns a read here).
  [[nodiscard]] bool own_core() const {
    if (!core_per_rank()) return false;
    if (shared_until_ == clock::time_point{}) return true;
    if (clock::now() < shared_until_) return false;
    shared_until_ = {};
    return true;
  }

  std::optional<int> fixed_;
  // Pauses of a spin that does not take the core for long: the fixed count, else shared_spins.
  // (Kept apart from fixed_ also because GCC 12 at -O3 took fixed_.value_or() in spin() for a
  // read of an uninitialised optional.)
  int short_spins_;
  clock::duration budget_;
  int ranks_;
  int cores_;
  const std::atomic<std::uint32_t>* resting_;  // of the ranks above; none if not counted
  clock::duration yield_period_;
  bool fixed_yield_;
  mutable clock::time_point shared_until_{};  // a yield's verdict: shared until then
  long involuntary_switches_ = 0;             // at the last look (switched_away)
  bool counting_switches_ = false;            // involuntary_switches_ is this yielding's (yield)
};

}  // namespace commx::detail::shm
