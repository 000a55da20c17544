#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MD (LAMMPS's in.lj, 32000 atoms) time per step on two sites of two ranks on this machine (no
# link emulation: what the layering costs, not the wide area): mpi+wan (each site its own
# mpirun, MPI inside it, wan between) against shm+tcp+wan (commxrun --nodes 2 --sites 2) and
# against one Open MPI job of four ranks (commx over transport::mpi), with commx's flat and
# hierarchical policies. Interleaved rounds, the order rotating; medians and ratios to mpi+wan.
#   bash bench/sites_md.sh [build dir] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/md_rounds.sh
source bench/md_rounds.sh
md_arguments "$@"
run=$build/tools/commxrun/commxrun
sites=$PWD/tests/transport/sites_by_launch.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ompi=(mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
      --mca btl "self,vader" --mca btl_vader_single_copy_mechanism none)
declare -A cmd
for policy in flat hierarchical; do
  cmd[mpi+wan/$policy]="bash $sites mpirun 4 ${md}_mpi_wan --collectives ${policy}"
  cmd[shm+tcp+wan/$policy]="$run -n 4 --nodes 2 --sites 2 --timeout 300 ${md}_shm_tcp_wan --collectives ${policy}"
  cmd[mpi/$policy]="${ompi[*]} ${md}_mpi --collectives ${policy}"
done
names=(mpi+wan/flat shm+tcp+wan/flat mpi/flat mpi+wan/hierarchical shm+tcp+wan/hierarchical
       mpi/hierarchical)
args=(--atoms-cells 20 --steps "$steps")
run_one() {
  # shellcheck disable=SC2086
  ${cmd[$1]} "${args[@]}"
}
against_mpi_wan() { echo "mpi+wan/${1#*/}"; }  # the same policy on mpi+wan
md_rounds "$rounds"
md_table against_mpi_wan
