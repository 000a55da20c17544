// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Replicated-data molecular dynamics over a commx communicator (CHARMM's parallel mode in
/// seed 000): every rank holds every atom, computes the forces of its share of the pairs, one
/// allreduce sums forces, energy and virial, and every rank integrates every atom.
///
/// `Sum` = std::int64_t (--survive) sums in fixed point (lj_force.hpp): the same bits whatever
/// the rank count and however the pairs are shared, so a run can lose ranks, go back to a step
/// every survivor completed, share the pairs among the survivors and go on to the bits of a run
/// that lost nothing. For that it keeps the last two completed steps (positions, velocities,
/// summed forces: 9 doubles per atom each) and the positions its neighbour list was built from:
/// a rank that completed a step may find that a peer died in that step's sum before it
/// completed it, never two steps (the next sum needs the dead rank's part).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "commx/deadline.hpp"

#include "integrator.hpp"
#include "lattice.hpp"
#include "lj_force.hpp"
#include "neighbor_list.hpp"
#include "phase_clock.hpp"
#include "run_config.hpp"
#include "sum_timeline.hpp"
#include "system.hpp"
#include "thermo.hpp"
#include "velocity_create.hpp"
#include "work_split.hpp"

namespace md {

template <class Comm, class Sum = double>
class replicated_md {
  using units = sum_units<Sum>;
  static constexpr bool keeps_steps = std::is_same_v<Sum, std::int64_t>;

 public:
  /// Sets up step 0 as LAMMPS does: lattice, velocities, wrap, neighbour list, forces. Every
  /// rank builds the full list once to share the pairs evenly, then keeps its own range; the
  /// ranges stay fixed for the run (atoms move a fraction of a cell in a few hundred steps).
  replicated_md(Comm& world, const run_config& config)
      : world_(&world), config_(config), system_(make_fcc(config.cells, config.density)) {
    create_velocities(system_, config_.temperature, config_.seed);
    const std::size_t n = system_.atoms();
    // Forces first, then energy and virial: one buffer, so one allreduce per step.
    buffer_.assign(3 * n + 2, Sum{0});
    if constexpr (keeps_steps) forces_.assign(3 * n, 0.0);
    wrap_into_box(system_);
    if constexpr (keeps_steps) {
      list_from_ = std::make_shared<const std::vector<double>>(system_.x);
      share_pairs();
      remember_step(-1);  // the caller sums step 0's forces: first_forces()
    } else {
      share_pairs();
      compute_forces(/*tally=*/true);
    }
  }

  /// Advances one step: half kick and drift, (on rebuild steps) wrap and rebuild, forces,
  /// half kick.
  void step() {
    ++step_;
    {
      scoped_phase timer(seconds_.integrate);
      kick_and_drift(system_, forces(), config_.dt);
    }
    if (step_ % config_.rebuild_every == 0) {
      scoped_phase timer(seconds_.neighbor);
      wrap_into_box(system_);
      list_.build(system_, config_.list_cutoff(), range_);
      if constexpr (keeps_steps)
        list_from_ = std::make_shared<const std::vector<double>>(system_.x);
    }
    compute_forces(config_.prints_thermo(step_));
    {
      scoped_phase timer(seconds_.integrate);
      kick(system_, forces(), config_.dt);
    }
    if constexpr (keeps_steps) remember_step(step_);
  }

  /// The last step whose forces every rank summed with this one (-1: not even step 0's).
  [[nodiscard]] long completed_step() const { return completed_; }

  /// Step 0's forces, summed over the ranks (fixed-point sums: the constructor leaves them to
  /// the caller, which may have to sum them again in a smaller team).
  void first_forces() requires keeps_steps {
    compute_forces(/*tally=*/true);
    remember_step(0);
  }

  /// Goes back to the end of `step` (one of the last two completed, or -1: setup before step
  /// 0's forces, which the caller then sums with first_forces()).
  /// @throws std::logic_error if this rank no longer holds that step.
  void go_back_to(long step) requires keeps_steps {
    const saved_step* found = nullptr;
    for (const saved_step& s : saved_) found = s.step == step ? &s : found;
    if (found == nullptr) {
      throw std::logic_error("md: cannot go back to step " + std::to_string(step) +
                             ": this rank holds steps " + std::to_string(saved_[0].step) + " and " +
                             std::to_string(saved_[1].step));
    }
    system_.x = found->x;
    system_.v = found->v;
    buffer_ = found->sums;
    list_from_ = found->list_from;
    // A kept step later than `step` is a future no longer taken: dropped, or doing that step
    // again would overwrite the older slot, the one gone back to, and leave no way back.
    for (saved_step& s : saved_) s.step = s.step > step ? -2 : s.step;
    step_ = std::max(step, 0L);
    completed_ = step;
    sums_.keep_first(static_cast<std::size_t>(std::max(step - timeline_from_, 0L)));
    forces_from_sums();
  }

  /// Goes on in `team` (what shrink returned): shares the pairs of the list as it was last
  /// built among its members.
  void rejoin(Comm& team) requires keeps_steps {
    world_ = &team;
    share_pairs();
  }

  /// The thermo row of the current step; energy and virial are those of the last force
  /// computation, which tallies them on every step that prints thermo.
  [[nodiscard]] thermo_row thermo() {
    scoped_phase timer(seconds_.thermo);
    const std::size_t n = system_.atoms();
    return make_thermo_row(step_, system_, units::tally_value(buffer_[3 * n]),
                           units::tally_value(buffer_[3 * n + 1]));
  }

  [[nodiscard]] long current_step() const { return step_; }
  [[nodiscard]] const system& state() const { return system_; }
  [[nodiscard]] atom_range my_atoms() const { return range_; }
  [[nodiscard]] std::size_t my_pairs() const { return list_.pairs(); }
  [[nodiscard]] const phase_seconds& seconds() const { return seconds_; }
  [[nodiscard]] const sum_timeline& sums() const { return sums_; }
  void reset_seconds() {
    seconds_ = {};
    sums_.clear();
    timeline_from_ = step_;
  }

 private:
  [[nodiscard]] std::span<const double> forces() const {
    if constexpr (keeps_steps) {
      return forces_;
    } else {
      return std::span<const double>(buffer_).first(3 * system_.atoms());
    }
  }

  // This rank's share of the pairs among world_'s ranks: every rank builds the full list to
  // share them evenly, then keeps its own range. With fixed-point sums the list is built from
  // the positions of the last build, so it holds the pairs the other ranks' lists hold.
  void share_pairs() {
    const std::size_t n = system_.atoms();
    const system* from = &system_;
    system kept;
    if constexpr (keeps_steps) {
      kept.box_length = system_.box_length;
      kept.x = *list_from_;
      from = &kept;
    }
    list_.build(*from, config_.list_cutoff(), {0, n});
    if (world_->size() > 1) {
      range_ = balanced_ranges(list_, world_->size())[static_cast<std::size_t>(world_->rank())];
      list_.build(*from, config_.list_cutoff(), range_);
    } else {
      range_ = {0, n};
    }
  }

  void compute_forces(bool tally) {
    const std::size_t n = system_.atoms();
    {
      scoped_phase timer(seconds_.force);
      std::fill(buffer_.begin(), buffer_.end(), Sum{0});
      const std::span<Sum> force = std::span<Sum>(buffer_).first(3 * n);
      const basic_pair_tally<Sum> sums =
          tally ? add_lj_forces<true, Sum>(system_.x, list_, config_.cutoff, force)
                : add_lj_forces<false, Sum>(system_.x, list_, config_.cutoff, force);
      buffer_[3 * n] = sums.energy;
      buffer_[3 * n + 1] = sums.virial;
    }
    const auto arrive = commx::clock::now();
    world_->allreduce(std::span<Sum>(buffer_), std::plus<>{});
    const auto leave = commx::clock::now();
    seconds_.allreduce += std::chrono::duration<double>(leave - arrive).count();
    sums_.record(arrive, leave);
    if constexpr (keeps_steps) forces_from_sums();
  }

  void forces_from_sums() requires keeps_steps {
    for (std::size_t k = 0; k < forces_.size(); ++k) forces_[k] = units::force_value(buffer_[k]);
  }

  // The state at the end of completed `step`, over the older of the two kept.
  void remember_step(long step) {
    completed_ = step;
    saved_step& slot = saved_[0].step <= saved_[1].step ? saved_[0] : saved_[1];
    slot.step = step;
    slot.x = system_.x;
    slot.v = system_.v;
    slot.sums = buffer_;
    slot.list_from = list_from_;
  }

  struct saved_step {
    long step = -2;  // none
    std::vector<double> x, v;
    std::vector<Sum> sums;
    std::shared_ptr<const std::vector<double>> list_from;
  };

  Comm* world_;
  run_config config_;
  system system_;
  std::vector<Sum> buffer_;
  std::vector<double> forces_;  // fixed-point sums: the forces they stand for
  half_neighbor_list list_;
  atom_range range_;
  long step_ = 0;
  long completed_ = -1;
  long timeline_from_ = 0;  // the step after which sums_ began (reset_seconds)
  saved_step saved_[2];
  std::shared_ptr<const std::vector<double>> list_from_;  // the positions of the last build
  phase_seconds seconds_;
  sum_timeline sums_;
};

}  // namespace md
