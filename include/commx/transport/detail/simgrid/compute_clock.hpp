// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A rank's compute as simulated time (COMMX_SIMGRID_COMPUTE=measured): the thread's CPU time
/// between two calls into the transport becomes an execution on the rank's host at the start
/// of the second. Only one rank runs at a time (SimGrid's actors take turns on one thread), so
/// that time is this rank's own.
///
/// Reading commx::clock is such a point too (settle_running, which the simulation's clock
/// calls): a program that times its compute with commx::clock (md_replicated's force phase)
/// sees that compute in its own reading, not in the next call's, as SMPI charges compute when
/// MPI_Wtime is read.

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Host.hpp>

#include <time.h>

namespace commx::detail::simgrid {

/// One rank's compute clock; its endpoint holds it and binds it to the rank's actor.
class compute_clock {
 public:
  explicit compute_clock(bool measured) : measured_(measured) { mark(); }
  compute_clock(const compute_clock&) = delete;
  compute_clock& operator=(const compute_clock&) = delete;
  /// Takes over `other`'s account (an endpoint moves inside its actor); rebinds if it was bound.
  compute_clock(compute_clock&& other) noexcept
      : measured_(other.measured_), last_(other.last_), owed_(other.owed_) {
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

  /// At the start of a call: the compute since the last one passes in simulated time.
  void enter() {
    in_call_ = true;
    if (!measured_) return;
    owed_ += cpu_seconds() - last_;
    if (owed_ < threshold_seconds) return;  // too short to be worth a simulation event
    ::simgrid::s4u::this_actor::execute(owed_ *
                                        ::simgrid::s4u::this_actor::get_host()->get_speed());
    owed_ = 0;
  }
  /// At the end of a call (the transport's own work and its waits are not compute).
  void mark() {
    in_call_ = false;
    if (measured_) last_ = cpu_seconds();
  }

  /// The running actor's compute until now passes in simulated time, if it is a rank's and is
  /// not inside a call into the transport.
  static void settle_running() {
    auto* actor = ::simgrid::s4u::Actor::self();
    if (actor == nullptr) return;  // the simulation's own thread (maestro), or none running
    auto* clock = actor->get_data<compute_clock>();
    if (clock == nullptr || clock->in_call_ || !clock->measured_) return;
    clock->enter();
    clock->mark();
  }

 private:
  static constexpr double threshold_seconds = 1e-6;  // SMPI's smpi/cpu-threshold

  [[nodiscard]] bool bound() const {
    auto* actor = ::simgrid::s4u::Actor::self();
    return actor != nullptr && actor->get_data<compute_clock>() == this;
  }

  static double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  }

  bool measured_;
  bool in_call_ = false;
  double last_ = 0;
  double owed_ = 0;
};

}  // namespace commx::detail::simgrid
