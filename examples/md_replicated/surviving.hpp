// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A run that goes on after ranks die (--survive): the recovery loop of README's "Going on
/// after a failure", around replicated_md with fixed-point sums.
///
/// When a step's force sum fails at a rank (a peer lost, or the communicator revoked by a
/// survivor that saw the loss), the rank revokes the team, so that every survivor still waiting
/// in that sum or the next ends too; shrinks it to the survivors; and agrees with them on the
/// last step all of them completed (the minimum: a survivor is at most one step ahead, as the
/// next sum needs every rank's part). Every survivor goes back to that step, shares the pairs
/// among the survivors and goes on. Because the sums are exact, the run ends with the bits of
/// a run that lost nothing, whatever rank count it started and ended with.
///
/// What a survivor keeps and sends does not grow with the job: two saved steps and the
/// positions of the last list build (21 doubles per atom) and, per recovery, a revoke and two
/// agreements; the lost ranks' list grows with the losses.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "commx/ops.hpp"
#include "commx/recovery.hpp"

#include "replicated_md.hpp"
#include "run_config.hpp"
#include "simulate.hpp"

namespace md {

/// Recoveries a run attempts before it gives up (each loses at least one rank).
inline constexpr int max_recoveries = 64;

namespace detail {

/// The world ranks of `team`'s members.
template <class Comm>
std::vector<int> members_of(Comm& team) {
  std::vector<int> members(static_cast<std::size_t>(team.size()));
  for (int r = 0; r < team.size(); ++r)
    members[static_cast<std::size_t>(r)] = team.world_rank_of(r);
  return members;
}

/// After a failure at this rank: revoke `team`, shrink it to the survivors and agree with
/// them on the step to go back to; `team` becomes the survivors. Shrinks again while ranks die
/// during the agreement.
template <class Comm, class MD>
recovery_record recover(Comm& team, MD& md) {
  const auto began = commx::clock::now();
  recovery_record record;
  record.failed_in = md.completed_step() + 1;
  const std::vector<int> before = members_of(team);
  team.revoke();
  for (int round = 0;; ++round) {
    if (round == max_recoveries)
      throw std::runtime_error("md: still losing ranks after 64 shrinks");
    Comm survivors = team.shrink();  // errc::no_majority when half or fewer survive a network job
    const auto agreed = survivors.agree(md.completed_step(), commx::op::min{});
    team = survivors;
    if (!agreed.lost.empty()) continue;  // someone died during the agreement: again
    record.back_to = agreed.value;
    break;
  }
  md.go_back_to(record.back_to);
  md.rejoin(team);
  const std::vector<int> after = members_of(team);
  for (int rank : before)
    if (std::ranges::find(after, rank) == after.end()) record.lost.push_back(rank);
  record.survivors = team.size();
  record.seconds = std::chrono::duration<double>(commx::clock::now() - began).count();
  return record;
}

}  // namespace detail

/// Runs `config` on this rank of `world`, going on without ranks that die; `on_thermo(row)`
/// is called on the current team's rank 0 for each printed step (once: a step done again after
/// a recovery has the same bits), `on_recovery(record)` there after each recovery. The clock
/// starts when step 0's forces are summed (no barrier before: a barrier is one more call a
/// failure could leave some ranks past and others not).
template <class Comm, class OnThermo, class OnRecovery>
requires commx::recovers_from_failures<Comm> run_outcome simulate_surviving(
    Comm& world, const run_config& config, OnThermo&& on_thermo, OnRecovery&& on_recovery) {
  run_outcome outcome;
  Comm team = world;
  replicated_md<Comm, std::int64_t> md(team, config);
  outcome.atoms = md.state().atoms();
  long shown = -1;  // the last step whose thermo row was kept
  const auto show = [&] {
    if (md.current_step() <= shown) return;
    shown = md.current_step();
    outcome.thermo.push_back(md.thermo());
    if (team.rank() == 0) on_thermo(outcome.thermo.back());
  };
  auto start = commx::clock::now();
  for (;;) {
    try {
      if (md.completed_step() < 0) {
        md.first_forces();
        md.reset_seconds();
        if constexpr (Comm::stats_type::enabled) team.stats().reset();
        start = commx::clock::now();
      }
      if (md.current_step() == 0) show();
      while (md.current_step() < config.steps) {
        md.step();
        if (config.prints_thermo(md.current_step())) show();
      }
      collect_outcome(team, md, std::chrono::duration<double>(commx::clock::now() - start).count(),
                      outcome);
      return outcome;
    } catch (const commx::error& e) {
      if (!commx::calls_for_recovery(e) ||
          outcome.recoveries.size() == static_cast<std::size_t>(max_recoveries)) {
        throw;
      }
      outcome.recoveries.push_back(detail::recover(team, md));
      if (team.rank() == 0) on_recovery(outcome.recoveries.back());
    }
  }
}

}  // namespace md
