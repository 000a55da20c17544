// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Wall time spent in each phase of a step, per rank.

#include <chrono>

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
  explicit scoped_phase(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  scoped_phase(const scoped_phase&) = delete;
  scoped_phase& operator=(const scoped_phase&) = delete;
  ~scoped_phase() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace md
