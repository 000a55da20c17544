// SPDX-License-Identifier: MIT
#pragma once
// The TreePM step, kick-drift-kick, over the ranks of site_links (GreeM's loop, seed 004):
//
//   kick, drift; send each particle to its (new) owner and to the ranks that need it as a
//   ghost; deposit the mesh; start the mesh sum (across the wide link it travels while the
//   tree force is computed); finish the particle exchange; tree force on the own particles,
//   letting the wide link move between chunks; finish the mesh sum; mesh force; kick.
//
// Each rank's figures of a step (times, energies, cost by x) ride with the next step's mesh
// sum, so a step's report costs no wide-area round trip of its own and arrives one step late.
// The forces on a particle do not depend on which rank computes them (short_range_tree.hpp,
// pm_mesh.hpp), so any rank count, site count or edge placement gives the same particles.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "commx/deadline.hpp"

#include "decomposition.hpp"
#include "force_params.hpp"
#include "particle.hpp"
#include "pm_mesh.hpp"
#include "short_range_tree.hpp"
#include "step_clock.hpp"
#include "treepm.hpp"

namespace nbody {

struct run_config {
  force_params forces;
  int steps = 10;
  double dt = 0.01;
  bool balance = true;
  int balance_bins = 256;
  std::size_t chunk = 1024;  // targets between two turns of the wide link's progress
};

/// One finished step, as every rank sees it (the sums run in rank order, so alike everywhere).
struct step_report {
  int step = 0;
  double time = 0;
  double energy = 0;
  double energy_error = 0;
  double wall = 0;       // the slowest rank's step
  step_split mean;       // the ranks' mean split of their step
  double imbalance = 1;  // slowest rank's tree time over the mean
  std::uint64_t particles = 0;
};

template <class Links>
class simulation {
 public:
  using report_fn = std::function<void(const step_report&)>;

  simulation(Links& links, step_clock& clock, const run_config& config,
             std::span<const particle> initial)
      : links_(links),
        clock_(clock),
        config_(config),
        decomposition_(config.forces, links.size()),
        mesh_(config.forces, total_mass(initial)),
        solver_(config.forces),
        particle_count_(initial.size()) {
    for (const particle& p : initial) {
      if (decomposition_.owner(p.pos[0]) == links_.rank()) own_.push_back(p);
    }
    figures_.assign(figures_each(), 0.0);
  }

  /// Runs the steps; `report` sees each step (on every rank) as its figures arrive.
  void run(const report_fn& report) {
    auto start = commx::clock::now();
    compute_forces();
    record_figures(since(start));
    for (int step = 1; step <= config_.steps; ++step) {
      start = commx::clock::now();
      {
        auto timed = clock_.time(part::compute);
        kick(own_, acceleration_, 0.5 * config_.dt);
        drift(own_, config_.dt, config_.forces.box);
        refuse_blown_up(step);
      }
      const std::vector<double> previous = compute_forces();
      {
        auto timed = clock_.time(part::compute);
        kick(own_, acceleration_, 0.5 * config_.dt);
      }
      take_report(previous, step - 1, report);
      record_figures(since(start));
    }
    // The last step's figures, with a mesh of nothing.
    mesh_.clear();
    links_.begin_mesh_sum(mesh_.cells(), figures_);
    take_report(links_.finish_mesh_sum(mesh_.cells(), figures_each()), config_.steps, report);
  }

  /// This rank's particles, in id order.
  [[nodiscard]] std::span<const particle> own() const { return own_; }

 private:
  // Per rank: compute, local, wide, kinetic, potential, particles, tree seconds, step seconds,
  // then the tree cost by x bin.
  static constexpr std::size_t scalar_figures = 8;
  [[nodiscard]] std::size_t figures_each() const {
    return scalar_figures + static_cast<std::size_t>(config_.balance_bins);
  }

  static double since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(commx::clock::now() - start).count();
  }

  // A particle that left the finite numbers takes the run with it: stop where it happened.
  void refuse_blown_up(int step) const {
    for (const particle& p : own_) {
      if (fault_of(p, config_.forces.box)) {
        throw std::runtime_error(fmt::format(
            "rank {}: particle {} left the finite numbers at step {} (a shorter --dt or a "
            "larger --softening keeps close pairs in hand)",
            links_.rank(), p.id, step));
      }
    }
  }

  // What another site sent must be a particle this run could hold. (A particle from this site
  // was checked by its holder after the drift.)
  void refuse_strangers(std::span<const particle> arrived) const {
    for (const particle& p : arrived) {
      if (const auto fault = fault_of(p, config_.forces.box)) {
        throw std::runtime_error(
            fmt::format("rank {} received from another site a particle (id {}) that {}",
                        links_.rank(), p.id, *fault));
      }
    }
  }

  // Returns every rank's figures of the step before.
  std::vector<double> compute_forces() {
    const int ranks = links_.size();
    std::vector<std::vector<particle>> outgoing(static_cast<std::size_t>(ranks));
    {
      auto timed = clock_.time(part::compute);
      for (const particle& p : own_) {
        const int owner = decomposition_.owner(p.pos[0]);
        for (int q = 0; q < ranks; ++q) {
          if (q == owner || decomposition_.needs(q, p.pos)) {
            outgoing[static_cast<std::size_t>(q)].push_back(p);
          }
        }
      }
    }
    std::vector<particle> sources = links_.begin_exchange(outgoing);
    {
      auto timed = clock_.time(part::compute);
      mesh_.clear();
      mesh_.deposit(own_);  // before the exchange: each particle is held by one rank
    }
    links_.begin_mesh_sum(mesh_.cells(), figures_);
    std::vector<particle> remote = links_.finish_exchange();
    refuse_strangers(remote);

    auto tree_start = commx::clock::now();
    std::optional<short_range_tree> tree;
    {
      auto timed = clock_.time(part::compute);
      sources.insert(sources.end(), remote.begin(), remote.end());
      own_.clear();
      for (const particle& p : sources) {
        if (decomposition_.owner(p.pos[0]) == links_.rank()) own_.push_back(p);
      }
      std::sort(own_.begin(), own_.end(),
                [](const particle& a, const particle& b) { return a.id < b.id; });
      acceleration_.assign(own_.size(), vec3{0, 0, 0});
      potential_.assign(own_.size(), 0.0);
      tree_start = commx::clock::now();
      tree.emplace(config_.forces, sources);
    }
    tree_seconds_ = since(tree_start);
    const std::span<const particle> targets(own_);
    for (std::size_t first = 0; first < own_.size(); first += config_.chunk) {
      const std::size_t n = std::min(config_.chunk, own_.size() - first);
      const auto chunk_start = commx::clock::now();
      {
        auto timed = clock_.time(part::compute);
        tree->accelerate(targets.subspan(first, n), std::span(acceleration_).subspan(first, n),
                         std::span(potential_).subspan(first, n));
      }
      tree_seconds_ += since(chunk_start);
      links_.progress();
    }

    std::vector<double> previous = links_.finish_mesh_sum(mesh_.cells(), figures_each());
    auto timed = clock_.time(part::compute);
    solver_.solve(mesh_);
    solver_.interpolate(own_, acceleration_, potential_);
    return previous;
  }

  void record_figures(double step_seconds) {
    const step_split split = clock_.take();
    std::fill(figures_.begin(), figures_.end(), 0.0);
    figures_[0] = split.compute;
    figures_[1] = split.local;
    figures_[2] = split.wide;
    figures_[3] = kinetic_energy(own_);
    figures_[4] = potential_energy(own_, potential_);
    figures_[5] = static_cast<double>(own_.size());
    figures_[6] = tree_seconds_;
    figures_[7] = step_seconds;
    if (own_.empty()) return;
    const double each = tree_seconds_ / static_cast<double>(own_.size());
    const auto bins = static_cast<double>(config_.balance_bins);
    for (const particle& p : own_) {
      const auto bin = std::min(static_cast<std::size_t>(p.pos[0] / config_.forces.box * bins),
                                static_cast<std::size_t>(config_.balance_bins) - 1);
      figures_[scalar_figures + bin] += each;
    }
  }

  // Turns every rank's figures of `step` into its report, and balances on them.
  void take_report(const std::vector<double>& all, int step, const report_fn& report) {
    const std::size_t each = figures_each();
    const auto ranks = static_cast<std::size_t>(links_.size());
    step_report r;
    r.step = step;
    r.time = step * config_.dt;
    double tree_total = 0;
    double tree_most = 0;
    std::vector<double> cost(static_cast<std::size_t>(config_.balance_bins), 0.0);
    for (std::size_t q = 0; q < ranks; ++q) {
      const double* f = all.data() + q * each;
      r.mean.compute += f[0] / static_cast<double>(ranks);
      r.mean.local += f[1] / static_cast<double>(ranks);
      r.mean.wide += f[2] / static_cast<double>(ranks);
      r.energy += f[3] + f[4];
      r.particles += static_cast<std::uint64_t>(f[5]);
      tree_total += f[6];
      tree_most = std::max(tree_most, f[6]);
      r.wall = std::max(r.wall, f[7]);
      for (std::size_t b = 0; b < cost.size(); ++b) cost[b] += f[scalar_figures + b];
    }
    // Every particle is owned by one rank: a count that changed means one was lost or doubled
    // on the way (every rank sums the same figures, so every rank stops here alike).
    if (r.particles != particle_count_) {
      throw std::runtime_error(fmt::format("after step {} the ranks own {} particles, not {}", step,
                                           r.particles, particle_count_));
    }
    if (step == 0) initial_energy_ = r.energy;
    r.energy_error =
        initial_energy_ != 0 ? (r.energy - initial_energy_) / std::abs(initial_energy_) : 0.0;
    r.imbalance = tree_total > 0 ? tree_most / (tree_total / static_cast<double>(ranks)) : 1.0;
    if (config_.balance && ranks > 1) decomposition_.balance(cost);
    report(r);
  }

  Links& links_;
  step_clock& clock_;
  run_config config_;
  decomposition decomposition_;
  mass_mesh mesh_;
  pm_solver solver_;
  std::vector<particle> own_;
  std::vector<vec3> acceleration_;
  std::vector<double> potential_;
  std::vector<double> figures_;
  double tree_seconds_ = 0;
  double initial_energy_ = 0;
  std::uint64_t particle_count_;
};

}  // namespace nbody
