// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What every md_replicated program does around the kernel: read the options and the
/// reference, run on one world, print the thermo, the per-rank table and the RESULT line. The
/// commx builds (main.cpp) and the hand-written MPI baseline (main_mpi_raw.cpp) share it.
///
/// Exit status: 0 ok; 2 bad options or reference file; 3 the thermo did not match the
/// reference or the replicas diverged; 1 the run failed (a communication error).

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command_line.hpp"
#include "run_report.hpp"
#include "simulate.hpp"
#include "surviving.hpp"
#include "thermo.hpp"
#include "thermo_reference.hpp"

namespace md {

using thermo_table = std::optional<std::vector<thermo_row>>;

/// Runs the kernel on this rank of `world` and prints the report on rank 0 (with --survive: on
/// rank 0 of the survivors); the exit status there (3: thermo or replicas wrong), 0 elsewhere.
/// `description` says how the build communicates.
template <class World>
int report_run(World& world, const run_labels& labels, std::string_view description,
               const command_line& options, const thermo_table& reference) {
  if (world.rank() == 0) {
    fmt::print(
        "{}: {} atoms, {} steps, {} ranks, transport {}, collectives {} ({}), {} "
        "reduction order{}\n",
        labels.target, labels.atoms, labels.steps, world.size(), labels.transport, labels.policy,
        description, options.reproducible ? "rank" : "the policy's",
        options.survive ? ", fixed-point sums, going on after losses" : "");
    fmt::print("{}", thermo_header());
    std::fflush(stdout);
  }
  const auto print_row = [](const thermo_row& row) {
    fmt::print("{}", format_thermo(row));
    std::fflush(stdout);
  };
  run_outcome outcome;
  if (!options.survive) {
    outcome = simulate(world, options.config, print_row);
  } else if constexpr (commx::recovers_from_failures<World>) {
    outcome = simulate_surviving(world, options.config, print_row, [](const recovery_record& r) {
      fmt::print(
          "recovered: lost rank{} {} in step {}; back to step {}; {} ranks go on; {:.1f} "
          "ms\n",
          r.lost.size() == 1 ? "" : "s", fmt::join(r.lost, ","), r.failed_in, r.back_to,
          r.survivors, r.seconds * 1e3);
      std::fflush(stdout);
    });
  } else {
    throw usage_error(
        "--survive: this stack cannot go on after a failure (mpi and mpi+wan: Debian's MPIs "
        "have no ULFM)");
  }
  if (!outcome.reports) return 0;

  fmt::print("{}", per_rank_table(outcome.ranks, options.config.steps));
  std::optional<thermo_comparison> match;
  if (reference) {
    match = compare_thermo(outcome.thermo, *reference);
    fmt::print(
        "thermo matches reference: {} (max rel err {:.3g} at step {}, step 0 {:.3g}, "
        "{} steps compared)\n",
        match->matches ? "yes" : "no", match->max_error, match->worst_step, match->max_error_step0,
        match->steps_compared);
  }
  if (options.survive) {
    std::vector<int> lost;
    for (const recovery_record& r : outcome.recoveries)
      lost.insert(lost.end(), r.lost.begin(), r.lost.end());
    fmt::print("survived: {} recover{}, ranks lost [{}], {} of {} ranks finished\n",
               outcome.recoveries.size(), outcome.recoveries.size() == 1 ? "y" : "ies",
               fmt::join(lost, ","), outcome.ranks.size(), world.size());
  }
  fmt::print("replicas agree: {}\n", outcome.replicas_agree ? "yes" : "no");
  // Runs that print the same fingerprint ended with the same bits in every position and
  // velocity: how tests show that stacks give bitwise identical results.
  fmt::print("final state fingerprint: {:016x}\n", outcome.final_state);
  fmt::print("{}", result_line(labels, outcome.ranks, match, outcome.replicas_agree,
                               outcome.combine_seconds));
  std::fflush(stdout);
  return !outcome.replicas_agree || (match && !match->matches) ? 3 : 0;
}

/// The labels of a run of `options`.
inline run_labels labels_of(std::string_view target, std::string_view transport,
                            std::string_view policy, const command_line& options) {
  const auto cells = static_cast<std::size_t>(options.config.cells);
  return {target,
          transport,
          policy,
          options.reproducible,
          options.config.steps,
          4 * cells * cells * cells};
}

/// A program's main: parses the options, reads the reference, then returns
/// `run(options, reference)`, or 2 for bad options, 1 for a run that threw.
template <class Run>
int program_main(int argc, char** argv, Run&& run) {
  const std::string program = argc > 0 ? argv[0] : "md_replicated";
  command_line options;
  thermo_table reference;
  try {
    options = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      fmt::print("{}", usage(program));
      return 0;
    }
    // Read before any rank starts, so a bad file fails at once rather than after the run.
    if (options.reference) reference = read_thermo_table(*options.reference);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 2;
  }
  try {
    return run(options, reference);
  } catch (const usage_error& e) {  // options only the run can judge (--collectives)
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
}

}  // namespace md
