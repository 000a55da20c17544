// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One whole run on one rank: set up, time the steps, collect every rank's figures on rank 0
/// (with each force sum split into imbalance and transfer) and check that the replicas stayed
/// identical.

#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "commx/deadline.hpp"

#include "combine_cost.hpp"
#include "rank_figures.hpp"
#include "replicated_md.hpp"
#include "run_config.hpp"
#include "sum_timeline.hpp"
#include "thermo.hpp"

namespace md {

/// One recovery of a --survive run: whom it lost, where it went back to, what it took.
struct recovery_record {
  long failed_in = 0;     // the step this rank was computing when it saw the failure
  long back_to = 0;       // the last step every survivor completed (-1: setup)
  std::vector<int> lost;  // world ranks
  int survivors = 0;
  double seconds = 0;  // from the error this rank saw to its share of the pairs in the new team
};

struct run_outcome {
  std::vector<thermo_row> thermo;   // every printed row, on every rank
  std::vector<rank_figures> ranks;  // every rank's figures, on rank 0 only
  bool replicas_agree = false;      // every rank ended with the same positions and velocities
  std::uint64_t final_state = 0;    // rank 0's state_fingerprint: equal bits, equal runs
  double combine_seconds = 0;       // one local add of the force buffer (combine_cost.hpp)
  std::size_t atoms = 0;
  bool reports = false;  // this rank prints the report: rank 0 of the communicator that finished
  std::vector<recovery_record> recoveries;  // --survive: each time ranks were lost, in order
};

namespace detail {

/// FNV-1a over the bits of every position and velocity: equal on every rank unless the
/// replicas diverged (they must not: every rank integrates the same summed forces).
[[nodiscard]] inline std::uint64_t state_fingerprint(const system& s) {
  std::uint64_t hash = 14695981039346656037ULL;
  const auto mix = [&hash](std::span<const double> values) {
    for (double value : values) {
      hash ^= std::bit_cast<std::uint64_t>(value);
      hash *= 1099511628211ULL;
    }
  };
  mix(s.x);
  mix(s.v);
  return hash;
}

}  // namespace detail

/// What every rank of `world` ran, gathered on its rank 0 (figures, each force sum split into
/// imbalance and transfer), and whether the replicas ended identical: the end of a run.
template <class Comm, class MD>
void collect_outcome(Comm& world, const MD& md, double loop_seconds, run_outcome& outcome) {
  rank_figures mine;
  mine.loop = loop_seconds;
  add_phases(mine, md.seconds());
  add_stats(mine, world.stats());
  mine.pairs = static_cast<double>(md.my_pairs());
  mine.first_atom = static_cast<double>(md.my_atoms().first);
  mine.last_atom = static_cast<double>(md.my_atoms().last);

  const auto ranks = static_cast<std::size_t>(world.size());
  std::vector<rank_figures> all(world.rank() == 0 ? ranks : 0);
  world.gather(mine, all, 0);
  // Every rank recorded the same number of sums, so the timelines gather as equal blocks.
  const sum_timeline& sums = md.sums();
  std::vector<double> arrivals(world.rank() == 0 ? ranks * sums.arrivals().size() : 0);
  std::vector<double> departures(arrivals.size());
  world.gather(sums.arrivals(), arrivals, 0);
  world.gather(sums.departures(), departures, 0);
  if (world.rank() == 0) {
    const sum_split split = split_sums(arrivals, departures, world.size());
    for (std::size_t r = 0; r < ranks; ++r) {
      all[r].imbalance = split.imbalance[r];
      all[r].transfer = split.transfer[r];
    }
  }
  outcome.ranks = std::move(all);

  std::vector<std::uint64_t> fingerprints(ranks);
  world.allgather(detail::state_fingerprint(md.state()), fingerprints);
  outcome.combine_seconds = measure_combine_seconds(3 * outcome.atoms + 2);
  outcome.replicas_agree = true;
  for (std::uint64_t f : fingerprints) outcome.replicas_agree &= f == fingerprints.front();
  outcome.final_state = fingerprints.front();
  outcome.reports = world.rank() == 0;
}

/// Runs `config` on this rank of `world`; `on_thermo(row)` is called on rank 0 for each
/// printed step, as soon as it is computed (every rank keeps the rows). Setup (step 0) is not
/// timed; the stats are reset after it, so they count the timed steps only.
template <class Comm, class OnThermo>
run_outcome simulate(Comm& world, const run_config& config, OnThermo&& on_thermo) {
  run_outcome outcome;
  replicated_md<Comm> md(world, config);
  outcome.atoms = md.state().atoms();
  const auto show = [&] {
    outcome.thermo.push_back(md.thermo());
    if (world.rank() == 0) on_thermo(outcome.thermo.back());
  };
  show();

  world.barrier();  // every rank starts the clock together
  md.reset_seconds();
  if constexpr (Comm::stats_type::enabled) world.stats().reset();
  const auto start = commx::clock::now();
  for (long step = 1; step <= config.steps; ++step) {
    md.step();
    if (config.prints_thermo(step)) show();
  }
  collect_outcome(world, md, std::chrono::duration<double>(commx::clock::now() - start).count(),
                  outcome);
  return outcome;
}

}  // namespace md
