// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How an MPI endpoint waits without burning a core. MPI posts no events a thread could sleep
/// on, so a waiting rank polls; between polls it backs off by how long nothing has happened:
/// the first 50 us it polls flat out (a ping-pong answer is a microsecond away), up to 2 ms it
/// gives its core away with sched_yield (ranks sharing cores get to run), and after that it
/// sleeps, a sixteenth of the idle time, at most 500 us, so a rank that waits long costs
/// almost nothing and still answers within half a millisecond. Any progress starts it over.

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "commx/deadline.hpp"

namespace commx::detail::mpi {

class backoff {
 public:
  static constexpr auto spin_for = std::chrono::microseconds(50);
  static constexpr auto yield_for = std::chrono::milliseconds(2);
  static constexpr auto longest_sleep = std::chrono::microseconds(500);

  /// Something happened: the next wait starts with polling again.
  void progressed() { idle_since_ = clock::time_point{}; }

  /// One step of waiting, never past `when`.
  void step(clock::time_point when) {
    const clock::time_point now = clock::now();
    if (idle_since_ == clock::time_point{}) idle_since_ = now;
    const clock::duration idle = now - idle_since_;
    if (idle < spin_for) return;
    if (idle < yield_for) {
      sched_yield();
      return;
    }
    const clock::duration nap = std::min<clock::duration>({idle / 16, longest_sleep, when - now});
    if (nap > clock::duration::zero()) std::this_thread::sleep_for(nap);
  }

 private:
  clock::time_point idle_since_{};
};

}  // namespace commx::detail::mpi
