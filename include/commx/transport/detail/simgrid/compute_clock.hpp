// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A rank's compute as simulated time (COMMX_SIMGRID_COMPUTE=measured): the time its thread
/// spends between two calls into the transport becomes an execution on the rank's host at the
/// start of the second. Only one rank runs at a time (SimGrid's actors take turns on one
/// thread), so that time is this rank's own.
///
/// Reading commx::clock is such a point too (settle_running, which the simulation's clock
/// calls): a program that times its compute with commx::clock (md_replicated's force phase)
/// sees that compute in its own reading, not in the next call's, as SMPI charges compute when
/// MPI_Wtime is read.
///
/// Calls nest: the communicator opens one around a whole blocking collective or wait
/// (`library_call`, transport/concept.hpp), and the transport's calls inside it charge nothing,
/// so commx's own work between them (a reduction's folds, the loop around a wait) is not the
/// program's compute, as the calls inside MPI_Allreduce are not under SMPI. An interval under
/// a microsecond is not charged either (SMPI's smpi/cpu-threshold): between a program's calls
/// that is mostly commx's own checks before the guard, and added up into lumps of a
/// microsecond it delayed most of 64 ranks' allreduces by one rank's lump.
///
/// Which clock: the thread's CPU time leaves out the time this process waited for a core (the
/// simulation shares the machine), but reading it is a system call (1.2-2.4 us on this VM,
/// where the monotonic clock takes 26 ns), and 1 reading in 200 took over 5 us. Read around
/// every transport call, it took more wall time than the simulation (10 steps of MD on 256
/// ranks: 9.1 s, 1.3 s with compute skipped), and its noise, charged to one of 64 ranks in most
/// calls, made back-to-back 1 KiB allreduces 45 simulated us where they take 5.3 (now 5.5-6.0
/// on a quiet machine). So an interval is timed by the monotonic clock, which only a wait for a
/// core lengthens by much, and one of `cpu_checked` or more is charged the lesser of that and
/// its CPU time (less one reading's cost).

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Host.hpp>

#include <time.h>

#include <algorithm>

namespace commx::detail::simgrid {

/// One rank's compute clock; its endpoint holds it and binds it to the rank's actor.
class compute_clock {
 public:
  explicit compute_clock(bool measured) : measured_(measured) {
    ++open_calls_;
    mark();  // the first interval starts here
  }
  compute_clock(const compute_clock&) = delete;
  compute_clock& operator=(const compute_clock&) = delete;
  /// Takes over `other`'s account (an endpoint moves inside its actor); rebinds if it was bound.
  compute_clock(compute_clock&& other) noexcept
      : measured_(other.measured_),
        open_calls_(other.open_calls_),
        last_cpu_(other.last_cpu_),
        last_wall_(other.last_wall_),
        charged_(other.charged_) {
    if (other.bound()) bind();
  }
  compute_clock& operator=(compute_clock&&) = delete;
  ~compute_clock() {
    if (bound()) ::simgrid::s4u::Actor::self()->set_data(nullptr);
  }

  /// From now on commx::clock read by this actor settles this clock first.
  void bind() {
    if (auto* actor = ::simgrid::s4u::Actor::self()) actor->set_data(this);
  }

  /// At the start of a call: the compute since the last one passes in simulated time; nothing
  /// for a call inside another.
  void enter() {
    if (open_calls_++ > 0 || !measured_) return;
    double gap = wall_seconds() - last_wall_;
    if (gap >= cpu_checked) gap = std::min(gap, cpu_seconds() - last_cpu_ - reading_seconds());
    if (gap < threshold_seconds) return;  // not charged (the file comment)
    charged_ += gap;
    ::simgrid::s4u::this_actor::execute(gap * ::simgrid::s4u::this_actor::get_host()->get_speed());
  }
  /// At the end of a call (the transport's own work and its waits are not compute).
  void mark() {
    if (--open_calls_ > 0 || !measured_) return;
    last_cpu_ = cpu_seconds();
    last_wall_ = wall_seconds();  // after: a slow CPU reading is not in the next interval
  }

  /// The compute charged so far, in seconds.
  [[nodiscard]] double charged() const { return charged_; }

  /// One call, from construction to destruction: enter() then mark().
  class call {
   public:
    explicit call(compute_clock& clock) : clock_(clock) { clock_.enter(); }
    ~call() { clock_.mark(); }
    call(const call&) = delete;
    call& operator=(const call&) = delete;

   private:
    compute_clock& clock_;
  };

  /// The running actor's compute until now passes in simulated time, if it is a rank's and is
  /// not inside a call into the transport.
  static void settle_running() {
    auto* actor = ::simgrid::s4u::Actor::self();
    if (actor == nullptr) return;  // the simulation's own thread (maestro), or none running
    auto* clock = actor->get_data<compute_clock>();
    if (clock == nullptr || clock->open_calls_ > 0 || !clock->measured_) return;
    const call reading(*clock);
  }

 private:
  static constexpr double threshold_seconds = 1e-6;  // SMPI's smpi/cpu-threshold's default
  static constexpr double cpu_checked = 20e-6;       // an interval its CPU time bounds

  [[nodiscard]] bool bound() const {
    auto* actor = ::simgrid::s4u::Actor::self();
    return actor != nullptr && actor->get_data<compute_clock>() == this;
  }

  // What one reading of the CPU clock adds to an interval between two: the least difference
  // of back-to-back readings.
  static double reading_seconds() {
    static const double cost = [] {
      double least = 1.0;
      for (int i = 0; i < 16; ++i) {
        const double first = cpu_seconds();
        least = std::min(least, cpu_seconds() - first);
      }
      return least;
    }();
    return cost;
  }

  static double seconds_of(clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  }
  static double cpu_seconds() { return seconds_of(CLOCK_THREAD_CPUTIME_ID); }
  static double wall_seconds() { return seconds_of(CLOCK_MONOTONIC); }

  bool measured_;
  int open_calls_ = 0;
  double last_cpu_ = 0;
  double last_wall_ = 0;
  double charged_ = 0;
};

}  // namespace commx::detail::simgrid
