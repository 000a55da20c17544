// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Time spent in each phase of a step, per rank: commx::clock's, so simulated seconds on a
/// simulated stack (transport::simgrid), the steady clock's elsewhere.

#include <chrono>

#include "commx/deadline.hpp"

namespace md {

struct phase_seconds {
  double force = 0;      // the LJ kernel over this rank's pairs
  double neighbor = 0;   // wrapping and neighbour list builds
  double integrate = 0;  // both half steps, all atoms (replicated)
  double allreduce = 0;  // the force sum, timed around the allreduce call
  double thermo = 0;     // thermo rows (temperature sums over all atoms)
};

/// Adds the time from its construction to its destruction to one counter.
class scoped_phase {
 public:
  explicit scoped_phase(double& total) : total_(total), start_(commx::clock::now()) {}
  scoped_phase(const scoped_phase&) = delete;
  scoped_phase& operator=(const scoped_phase&) = delete;
  ~scoped_phase() { total_ += std::chrono::duration<double>(commx::clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace md
