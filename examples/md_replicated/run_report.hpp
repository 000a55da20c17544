// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Rank 0's report: a per-rank table for people and one `RESULT key=value ...` line for the
/// main job's driver (scripts/md_compare.py), which parses nothing else.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "rank_figures.hpp"
#include "thermo_reference.hpp"

namespace md {

/// What the run was, for the report's labels.
struct run_labels {
  std::string_view target;     // e.g. md_replicated_inproc_ring
  std::string_view transport;  // the transport's name
  std::string_view policy;     // the collectives policy's name
  bool reproducible = false;
  long steps = 0;
  std::size_t atoms = 0;
};

[[nodiscard]] inline std::string per_rank_table(const std::vector<rank_figures>& ranks,
                                                long steps) {
  const double per_step = 1e3 / static_cast<double>(std::max(steps, 1L));  // s -> ms per step
  std::string text = fmt::format(
      "per rank, ms per step. comm is the force sum (allreduce), split two ways: send (posting "
      "and completing sends) + wait (blocked on receives) + local work, as counted by the stats "
      "policy; imbal (waiting for the last rank to arrive) + xfer (after it arrived).\n"
      "{:>4} {:>11} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>10}\n",
      "rank", "atoms", "pairs", "total", "force", "neigh", "integr", "comm", "send", "wait",
      "imbal", "xfer", "comm%", "bytes/step");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const rank_figures& f = ranks[r];
    text += fmt::format(
        "{:>4} {:>5}-{:<5} {:>8} {:>8.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} "
        "{:>7.3f} {:>7.3f} {:>5.1f}% {:>10.0f}\n",
        r, static_cast<long>(f.first_atom), static_cast<long>(f.last_atom),
        static_cast<long>(f.pairs), f.loop * per_step, f.force * per_step, f.neighbor * per_step,
        f.integrate * per_step, f.communication() * per_step, f.send * per_step, f.wait * per_step,
        f.imbalance * per_step, f.transfer * per_step, 100 * f.communication_fraction(),
        (f.bytes_sent + f.bytes_received) / static_cast<double>(std::max(steps, 1L)));
  }
  return text;
}

/// One line, space-separated key=value, values without spaces. Times are ms per step and,
/// except time_per_step_ms (the slowest rank's loop), means over ranks; fractions are of each
/// rank's loop time, averaged over ranks.
[[nodiscard]] inline std::string result_line(const run_labels& labels,
                                             const std::vector<rank_figures>& ranks,
                                             const std::optional<thermo_comparison>& match,
                                             bool replicas_agree, double combine_seconds) {
  const double steps = static_cast<double>(std::max(labels.steps, 1L));
  const double n = static_cast<double>(std::max<std::size_t>(ranks.size(), 1));
  double slowest = 0, worst_fraction = 0;
  rank_figures mean;
  double fraction = 0, transfer_fraction = 0;
  for (const rank_figures& f : ranks) {
    slowest = std::max(slowest, f.loop);
    mean.force += f.force / n;
    mean.collective += f.communication() / n;
    mean.send += f.send / n;
    mean.wait += f.wait / n;
    mean.imbalance += f.imbalance / n;
    mean.transfer += f.transfer / n;
    mean.bytes_sent += (f.bytes_sent + f.bytes_received) / n;
    fraction += f.communication_fraction() / n;
    transfer_fraction += f.transfer_fraction() / n;
    worst_fraction = std::max(worst_fraction, f.communication_fraction());
  }
  const auto ms = [steps](double seconds) { return 1e3 * seconds / steps; };
  const bool counted = !ranks.empty() && ranks.front().counted != 0;
  std::string line = fmt::format(
      "RESULT target={} transport={} policy={} reduction={} ranks={} atoms={} steps={} "
      "time_per_step_ms={:.6g} force_ms={:.6g} comm_ms={:.6g} send_ms={:.6g} wait_ms={:.6g} "
      "imbalance_ms={:.6g} transfer_ms={:.6g} comm_fraction={:.6g} comm_fraction_max={:.6g} "
      "transfer_fraction={:.6g} bytes_per_step={:.6g} combine_ms={:.6g} stats={} replicas_agree={}",
      labels.target, labels.transport, labels.policy,
      labels.reproducible ? "reproducible" : "policy", ranks.size(), labels.atoms, labels.steps,
      ms(slowest), ms(mean.force), ms(mean.collective), ms(mean.send), ms(mean.wait),
      ms(mean.imbalance), ms(mean.transfer), fraction, worst_fraction, transfer_fraction,
      mean.bytes_sent / steps, 1e3 * combine_seconds, counted ? "counting" : "none",
      replicas_agree ? "yes" : "no");
  if (match) {
    line += fmt::format(" thermo_match={} thermo_max_rel_err={:.3g} thermo_steps_compared={}",
                        match->matches ? "yes" : "no", match->max_error, match->steps_compared);
  } else {
    line += " thermo_match=none";
  }
  return line + "\n";
}

}  // namespace md
