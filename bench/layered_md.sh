#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MD (LAMMPS's in.lj, 32000 atoms) time per step on two simulated nodes of two ranks: the
# layered stack shm+tcp (shm within a node, tcp between) against tcp alone, shm alone (one node
# of four: the bound) and Open MPI (btl self,vader,tcp, which on one host uses vader for every
# pair; and btl self,tcp), each with commx's flat policy; and shm+tcp and shm with
# coll::hierarchical, Open MPI with its own collectives (coll::native); where UCX is built,
# shm+ucx (flat and hierarchical) and ucx alone. Interleaved rounds,
# the order rotating; prints each run's median time per step over the rounds and its ratio to
# shm+tcp.
#   bash bench/layered_md.sh [build dir] [rounds] [steps] [before build dir]
# With a before build dir (a release build of an earlier tree), shm and tcp from that tree run
# in the same rounds, so a change's cost to them shows side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/md_rounds.sh
source bench/md_rounds.sh
md_arguments "$@"
before=${4:-}
run=$build/tools/commxrun/commxrun
args=(--atoms-cells 20 --steps "$steps")
ompi=(mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
declare -A cmd
cmd[shm+tcp]="$run -n 4 --nodes 2 --timeout 300 ${md}_shm_tcp --collectives flat"
cmd[shm+tcp/hier]="$run -n 4 --nodes 2 --timeout 300 ${md}_shm_tcp --collectives hierarchical"
cmd[tcp]="$run -n 4 --nodes 2 --timeout 300 ${md}_tcp --collectives flat"
cmd[shm]="$run -n 4 --timeout 300 ${md}_shm --collectives flat"
cmd[shm/hier]="$run -n 4 --timeout 300 ${md}_shm --collectives hierarchical"
cmd[ompi-vader+tcp]="${ompi[*]} --mca btl self,vader,tcp ${md}_mpi --collectives flat"
cmd[ompi-tcp]="${ompi[*]} --mca btl self,tcp ${md}_mpi --collectives flat"
cmd[ompi-native]="${ompi[*]} --mca btl self,vader,tcp ${md}_mpi --collectives native"
names=(shm+tcp shm+tcp/hier tcp shm shm/hier ompi-vader+tcp ompi-tcp ompi-native)
# With UCX built: shm+ucx (UCX over its TCP between the nodes: its shared memory reports no
# peer's failure) and ucx alone, likewise.
if [[ -x ${md}_shm_ucx ]]; then
  cmd[shm+ucx]="$run -n 4 --nodes 2 --timeout 300 ${md}_shm_ucx --collectives flat"
  cmd[shm+ucx/hier]="$run -n 4 --nodes 2 --timeout 300 ${md}_shm_ucx --collectives hierarchical"
  cmd[ucx]="$run -n 4 --nodes 2 --timeout 300 ${md}_ucx --collectives flat"
  names+=(shm+ucx shm+ucx/hier ucx)
fi
if [[ -n $before ]]; then
  cmd[shm-before]="$before/tools/commxrun/commxrun -n 4 --timeout 300 $before/examples/md_replicated/md_replicated_shm --collectives flat"
  cmd[tcp-before]="$before/tools/commxrun/commxrun -n 4 --nodes 2 --timeout 300 $before/examples/md_replicated/md_replicated_tcp --collectives flat"
  names+=(shm-before tcp-before)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_one() {
  # shellcheck disable=SC2086
  ${cmd[$1]} "${args[@]}"
}
against_shm_tcp() { echo shm+tcp; }
md_rounds "$rounds"
md_table against_shm_tcp
