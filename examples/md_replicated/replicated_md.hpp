// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Replicated-data molecular dynamics over a commx communicator (CHARMM's parallel mode in
/// seed 000): every rank holds every atom, computes the forces of its share of the pairs, one
/// allreduce sums forces, energy and virial, and every rank integrates every atom.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
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

template <class Comm>
class replicated_md {
 public:
  /// Sets up step 0 as LAMMPS does: lattice, velocities, wrap, neighbour list, forces. Every
  /// rank builds the full list once to share the pairs evenly, then keeps its own range; the
  /// ranges stay fixed for the run (atoms move a fraction of a cell in a few hundred steps).
  replicated_md(Comm& world, const run_config& config)
      : world_(world), config_(config), system_(make_fcc(config.cells, config.density)) {
    create_velocities(system_, config_.temperature, config_.seed);
    const std::size_t n = system_.atoms();
    // Forces first, then energy and virial: one buffer, so one allreduce per step.
    buffer_.assign(3 * n + 2, 0.0);
    wrap_into_box(system_);
    list_.build(system_, config_.list_cutoff(), {0, n});
    if (world_.size() > 1) {
      range_ = balanced_ranges(list_, world_.size())[static_cast<std::size_t>(world_.rank())];
      list_.build(system_, config_.list_cutoff(), range_);
    } else {
      range_ = {0, n};
    }
    compute_forces(/*tally=*/true);
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
    }
    compute_forces(config_.prints_thermo(step_));
    scoped_phase timer(seconds_.integrate);
    kick(system_, forces(), config_.dt);
  }

  /// The thermo row of the current step; energy and virial are those of the last force
  /// computation, which tallies them on every step that prints thermo.
  [[nodiscard]] thermo_row thermo() {
    scoped_phase timer(seconds_.thermo);
    const std::size_t n = system_.atoms();
    return make_thermo_row(step_, system_, buffer_[3 * n], buffer_[3 * n + 1]);
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
  }

 private:
  [[nodiscard]] std::span<const double> forces() const {
    return std::span<const double>(buffer_).first(3 * system_.atoms());
  }

  void compute_forces(bool tally) {
    const std::size_t n = system_.atoms();
    {
      scoped_phase timer(seconds_.force);
      std::fill(buffer_.begin(), buffer_.end(), 0.0);
      const std::span<double> force = std::span<double>(buffer_).first(3 * n);
      const pair_tally sums = tally ? add_lj_forces<true>(system_.x, list_, config_.cutoff, force)
                                    : add_lj_forces<false>(system_.x, list_, config_.cutoff, force);
      buffer_[3 * n] = sums.energy;
      buffer_[3 * n + 1] = sums.virial;
    }
    const auto arrive = commx::clock::now();
    world_.allreduce(std::span<double>(buffer_), std::plus<>{});
    const auto leave = commx::clock::now();
    seconds_.allreduce += std::chrono::duration<double>(leave - arrive).count();
    sums_.record(arrive, leave);
  }

  Comm& world_;
  run_config config_;
  system system_;
  std::vector<double> buffer_;
  half_neighbor_list list_;
  atom_range range_;
  long step_ = 0;
  phase_seconds seconds_;
  sum_timeline sums_;
};

}  // namespace md
