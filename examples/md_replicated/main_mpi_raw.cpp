// SPDX-License-Identifier: MIT
// The MD kernel of main.cpp written directly against MPI (mpi_world.hpp: MPI_Allreduce, no
// commx): md_replicated_mpi_raw, the baseline of the main job's table, every row of which
// gives its ratio to this build's time per step at the same rank count.
//
//   mpirun -np 4 ./md_replicated_mpi_raw --reference thermo.lj32000.txt
//
// Exit status: see program.hpp.

#include <mpi.h>

#include <fmt/format.h>

#include "mpi_world.hpp"
#include "program.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int status = md::program_main(
      argc, argv, [](const md::command_line& options, const md::thermo_table& reference) {
        if (options.reproducible) {
          fmt::print(stderr,
                     "md_replicated_mpi_raw: --reproducible is commx's; MPI orders the sum\n");
          return 2;
        }
        md::mpi_world world(MPI_COMM_WORLD);
        return md::report_run(world, md::labels_of("md_replicated_mpi_raw", "mpi", "raw", options),
                              "MPI_Allreduce, no commx", options, reference);
      });
  MPI_Finalize();
  return status;
}
