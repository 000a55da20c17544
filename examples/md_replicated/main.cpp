// SPDX-License-Identifier: MIT
// Replicated-data Lennard-Jones MD, LAMMPS's bench/in.lj, written once over a commx
// communicator and built once per stack by commx_add_variants (md_replicated_<transport>), with
// every collectives policy compiled in (--collectives picks one; ANY_COLLECTIVES), or once per
// stack and policy (md_replicated_<transport>_<policy>) where a build asks for one policy.
//
//   COMMX_INPROC_RANKS=4 ./md_replicated_inproc --collectives binomial --reference thermo.lj32000.txt
//   commxrun -n 4 ./md_replicated_shm --atoms-cells 5 --steps 100
//
// Exit status: see program.hpp.

#include <atomic>

#include <fmt/format.h>

#include "commx/transport/faulty.hpp"

#include "commx/variant.hpp"
#include "commx/variant_collectives.hpp"
#include "program.hpp"

namespace {

template <class comm>
int run_md(const md::command_line& options, const md::thermo_table& reference) {
  std::atomic<int> status{0};  // the reporting rank's (others return 0)
  try {
    commx::run<comm>([&](comm& world) {
      if (options.reproducible) world.set_reduction(commx::reduction_order::reproducible);
      try {
        const int mine =
            md::report_run(world,
                           md::labels_of(commx::variant::target_name, world.transport().name,
                                         comm::collectives_type::name, options),
                           comm::collectives_type::description, options, reference);
        if (mine != 0) status = mine;
      } catch (const commx::transport::injected_kill& e) {
        // A faulty in-process build killed this rank as its plan said: it says so, as a
        // killed process does, and ends.
        fmt::print(stderr, "{}\n", e.what());
        throw;
      }
    });
  } catch (const commx::transport::injected_kill&) {
    // With --survive the others went on and reported; without, they failed and commx::run
    // raised their error instead.
    if (!options.survive) throw;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using comm = commx::variant::communicator;
  return md::program_main(
      argc, argv, [](const md::command_line& options, const md::thermo_table& reference) {
        const std::string wanted =
            options.collectives.value_or(std::string(comm::collectives_type::name));
        if (options.list_collectives) {
          fmt::print("{}\n", commx::variant::collectives_names());
          return 0;
        }
        const auto status = commx::variant::with_collectives(wanted, [&]<class Collectives>() {
          return run_md<commx::variant::communicator_with<Collectives>>(options, reference);
        });
        if (!status) {
          throw md::usage_error(fmt::format("--collectives {}: this program has {}", wanted,
                                            commx::variant::collectives_names()));
        }
        return *status;
      });
}
