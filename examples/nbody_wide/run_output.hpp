// SPDX-License-Identifier: MIT
#pragma once
// What a person reads: one line per step, the same as a CSV row, and the run's last lines
// (the fingerprint that tests compare across arrangements, and one result line the main job
// collects).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "particle.hpp"
#include "simulation.hpp"
#include "snapshot.hpp"

namespace nbody {

inline double wide_fraction(const step_report& r) {
  const double total = r.mean.compute + r.mean.local + r.mean.wide;
  return total > 0 ? r.mean.wide / total : 0.0;
}

inline std::string progress_line(const step_report& r) {
  return fmt::format(
      "step {:5d}  t {:8.4f}  dE/E {:+.3e}  step {:8.2f} ms  compute {:8.2f}  local {:7.2f}  "
      "wide {:7.2f} ms ({:4.1f}%)  imbalance {:.2f}\n",
      r.step, r.time, r.energy_error, r.wall * 1e3, r.mean.compute * 1e3, r.mean.local * 1e3,
      r.mean.wide * 1e3, 100 * wide_fraction(r), r.imbalance);
}

/// The per-step table, as the progress lines give it (times in seconds, per-rank means).
class step_csv {
 public:
  explicit step_csv(const std::string& path) : out_(path) {
    if (!out_) throw std::runtime_error(fmt::format("cannot write '{}'", path));
    out_ << "step,time,energy,energy_error,step_seconds,compute_seconds,local_seconds,"
            "wide_seconds,wide_fraction,imbalance,particles\n";
  }
  void add(const step_report& r) {
    out_ << fmt::format("{},{:.6g},{:.17g},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{:.5f},{:.4f},{}\n",
                        r.step, r.time, r.energy, r.energy_error, r.wall, r.mean.compute,
                        r.mean.local, r.mean.wide, wide_fraction(r), r.imbalance, r.particles);
    out_.flush();
  }

 private:
  std::ofstream out_;
};

/// FNV-1a over the particles' bytes in id order: runs that print the same fingerprint ended
/// with the same bits in every position and velocity.
inline std::uint64_t fingerprint(std::span<const particle> by_id) {
  return detail::fnv1a(reinterpret_cast<const unsigned char*>(by_id.data()), by_id.size_bytes());
}

/// What the run computes, as a hash: its options that change the particles and its initial
/// conditions. Sites that are jobs of their own compare theirs before they start.
inline std::uint64_t problem_id(const run_config& run, std::span<const particle> initial) {
  const force_params& f = run.forces;
  const double reals[] = {f.box, f.split_cells, f.cutoff_splits, f.theta, f.softening, run.dt};
  const std::int64_t counts[] = {f.mesh, f.leaf_size, run.steps, run.balance_bins,
                                 static_cast<std::int64_t>(initial.size())};
  std::vector<unsigned char> bytes(sizeof reals + sizeof counts + sizeof(std::uint64_t));
  std::memcpy(bytes.data(), reals, sizeof reals);
  std::memcpy(bytes.data() + sizeof reals, counts, sizeof counts);
  const std::uint64_t particles = fingerprint(initial);
  std::memcpy(bytes.data() + sizeof reals + sizeof counts, &particles, sizeof particles);
  return detail::fnv1a(bytes.data(), bytes.size());
}

}  // namespace nbody
