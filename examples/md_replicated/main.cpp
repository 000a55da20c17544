// SPDX-License-Identifier: MIT
// Replicated-data Lennard-Jones MD, LAMMPS's bench/in.lj, written once over
// commx::variant::communicator and built once per stack and collectives policy by
// commx_add_variants (md_replicated_<transport>_<policy>).
//
//   COMMX_INPROC_RANKS=4 ./md_replicated_inproc_binomial --reference thermo.lj32000.txt
//   commxrun -n 4 ./md_replicated_shm_binomial --atoms-cells 5 --steps 100
//
// Exit status: see program.hpp.

#include "commx/variant.hpp"
#include "program.hpp"

int main(int argc, char** argv) {
  using comm = commx::variant::communicator;
  return md::program_main(
      argc, argv, [](const md::command_line& options, const md::thermo_table& reference) {
        int status = 0;
        commx::run<comm>([&](comm& world) {
          if (options.reproducible) world.set_reduction(commx::reduction_order::reproducible);
          const int mine =
              md::report_run(world,
                             md::labels_of(commx::variant::target_name, world.transport().name,
                                           comm::collectives_type::name, options),
                             comm::collectives_type::description, options, reference);
          if (world.rank() == 0) status = mine;
        });
        return status;
      });
}
