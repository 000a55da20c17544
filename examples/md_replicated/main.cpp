// SPDX-License-Identifier: MIT
// Replicated-data Lennard-Jones MD, LAMMPS's bench/in.lj, written once over
// commx::variant::communicator and built once per stack and collectives policy by
// commx_add_variants (md_replicated_<transport>_<policy>).
//
//   COMMX_INPROC_RANKS=4 ./md_replicated_inproc_binomial --reference thermo.lj32000.txt
//   commxrun -n 4 ./md_replicated_shm_binomial --atoms-cells 5 --steps 100
//
// Exit status: 0 ok; 2 bad options or reference file; 3 the thermo did not match the
// reference or the replicas diverged; 1 the run failed (a communication error).

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "command_line.hpp"
#include "commx/variant.hpp"
#include "run_report.hpp"
#include "simulate.hpp"
#include "thermo.hpp"
#include "thermo_reference.hpp"

namespace {

using comm = commx::variant::communicator;

int run(const md::command_line& options,
        const std::optional<std::vector<md::thermo_row>>& reference) {
  int status = 0;
  commx::run<comm>([&](comm& world) {
    if (options.reproducible) world.set_reduction(commx::reduction_order::reproducible);
    const bool root = world.rank() == 0;
    const md::run_labels labels{commx::variant::target_name,
                                world.transport().name,
                                comm::collectives_type::name,
                                options.reproducible,
                                options.config.steps,
                                4 * static_cast<std::size_t>(options.config.cells) *
                                    static_cast<std::size_t>(options.config.cells) *
                                    static_cast<std::size_t>(options.config.cells)};
    if (root) {
      fmt::print(
          "{}: {} atoms, {} steps, {} ranks, transport {}, collectives {} ({}), {} "
          "reduction order\n",
          labels.target, labels.atoms, labels.steps, world.size(), labels.transport, labels.policy,
          comm::collectives_type::description, options.reproducible ? "rank" : "the policy's");
      fmt::print("{}", md::thermo_header());
      std::fflush(stdout);
    }
    const md::run_outcome outcome = md::simulate(world, options.config, [&](const auto& row) {
      if (!root) return;
      fmt::print("{}", md::format_thermo(row));
      std::fflush(stdout);
    });
    if (!root) return;

    fmt::print("{}", md::per_rank_table(outcome.ranks, options.config.steps));
    std::optional<md::thermo_comparison> match;
    if (reference) {
      match = md::compare_thermo(outcome.thermo, *reference);
      fmt::print(
          "thermo matches reference: {} (max rel err {:.3g} at step {}, step 0 {:.3g}, "
          "{} steps compared)\n",
          match->matches ? "yes" : "no", match->max_error, match->worst_step,
          match->max_error_step0, match->steps_compared);
    }
    fmt::print("replicas agree: {}\n", outcome.replicas_agree ? "yes" : "no");
    // Runs that print the same fingerprint ended with the same bits in every position and
    // velocity: how tests show that stacks give bitwise identical results.
    fmt::print("final state fingerprint: {:016x}\n", outcome.final_state);
    fmt::print("{}", md::result_line(labels, outcome.ranks, match, outcome.replicas_agree,
                                     outcome.combine_seconds));
    std::fflush(stdout);
    if (!outcome.replicas_agree || (match && !match->matches)) status = 3;
  });
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = argc > 0 ? argv[0] : "md_replicated";
  md::command_line options;
  std::optional<std::vector<md::thermo_row>> reference;
  try {
    options = md::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      fmt::print("{}", md::usage(program));
      return 0;
    }
    // Read before any rank starts, so a bad file fails at once rather than after the run.
    if (options.reference) reference = md::read_thermo_table(*options.reference);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 2;
  }
  try {
    return run(options, reference);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
}
