// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What one rank measured over the timed steps: compute phases from its own clocks, and
/// communication from the communicator's stats policy (seed 000's Tables 1 and 2 split it into
/// send and receive time; here send is posting and completing sends, wait is blocking for
/// receives, as stats::counting defines them).

#include <cstdint>
#include <type_traits>

#include "commx/stats.hpp"
#include "phase_clock.hpp"

namespace md {

/// Plain doubles, so that one gather brings every rank's figures to rank 0.
struct rank_figures {
  double loop = 0;       // wall time of the timed steps
  double force = 0;      // LJ kernel
  double neighbor = 0;   // wrap + list builds
  double integrate = 0;  // velocity Verlet, all atoms
  double thermo = 0;
  double allreduce = 0;   // the force sum timed around the call (includes waiting for slower ranks)
  double imbalance = 0;   // of that: waiting for the last rank to arrive (sum_timeline.hpp)
  double transfer = 0;    // of that: from the last rank's arrival to leaving the allreduce
  double collective = 0;  // stats: whole collective calls, all kinds
  double send = 0;        // stats: posting and completing sends
  double wait = 0;        // stats: blocked waiting for receives
  double bytes_sent = 0;
  double bytes_received = 0;
  double messages_sent = 0;
  double messages_received = 0;
  double pairs = 0;  // neighbour-list pairs this rank computes
  double first_atom = 0;
  double last_atom = 0;
  double counted = 0;  // 1 when the communicator keeps stats, 0 under stats::none

  /// Communication time: the stats' collective time when kept, else the outside timer.
  [[nodiscard]] double communication() const { return counted != 0 ? collective : allreduce; }
  [[nodiscard]] double communication_fraction() const {
    return loop > 0 ? communication() / loop : 0;
  }
  /// The part of the step the transport itself costs, load imbalance taken out.
  [[nodiscard]] double transfer_fraction() const { return loop > 0 ? transfer / loop : 0; }
};
static_assert(std::is_trivially_copyable_v<rank_figures>);

/// Fills the communication fields from a stats policy (nothing to fill under stats::none).
template <class Stats>
void add_stats(rank_figures& figures, const Stats& stats) {
  if constexpr (Stats::enabled) {
    const commx::stats::counters total = stats.total();
    figures.collective = total.collective_seconds;
    figures.send = total.send_seconds;
    figures.wait = total.wait_seconds;
    figures.bytes_sent = static_cast<double>(total.bytes_sent);
    figures.bytes_received = static_cast<double>(total.bytes_received);
    figures.messages_sent = static_cast<double>(total.messages_sent);
    figures.messages_received = static_cast<double>(total.messages_received);
    figures.counted = 1;
  }
}

inline void add_phases(rank_figures& figures, const phase_seconds& phases) {
  figures.force = phases.force;
  figures.neighbor = phases.neighbor;
  figures.integrate = phases.integrate;
  figures.thermo = phases.thermo;
  figures.allreduce = phases.allreduce;
}

}  // namespace md
