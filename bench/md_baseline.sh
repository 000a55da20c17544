#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MD (LAMMPS's in.lj, 32000 atoms) time per step against the hand-written MPI baseline
# (md_replicated_mpi_raw: the same kernel on MPI_Allreduce, no commx), at 2 and 4 ranks on one
# node: commx over mpi with MPI's own collectives (coll::native, the issue's 1.02x goal) and
# with binomial, and shm with binomial and tuned (tuned also with COMMX_SHM_LARGE=copy).
# Interleaved rounds, the order rotating; prints each run's median and its ratio to the
# baseline at the same rank count.
#   bash bench/md_baseline.sh [build dir] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/md_rounds.sh
source bench/md_rounds.sh
md_arguments "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
names=()
for n in 2 4; do
  names+=("mpi_raw/$n" "mpi_native/$n" "mpi_binomial/$n" "shm_binomial/$n" "shm_tuned/$n"
    "shm_tuned+copy/$n")
done
# NAME+copy: the same program with large shm messages in pipelined pieces through the ring
# (COMMX_SHM_LARGE=copy, the default from 2026-11-26 to 2026-12-03), beside cma (the default).
run_one() {
  local program=${1%/*} ranks=${1#*/}
  local settings=()
  if [[ $program == *+copy ]]; then
    program=${program%+copy}
    settings=(COMMX_SHM_LARGE=copy)
  fi
  # STACK_POLICY: md_replicated_STACK holds every policy (--collectives); mpi_raw is its own.
  local exe=("${md}_$program")
  [[ $program == mpi_raw ]] || exe=("${md}_${program%_*}" --collectives "${program##*_}")
  if [[ $program == mpi_* ]]; then
    mpirun -np "$ranks" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
      "${exe[@]}" --steps "$steps"
  else
    env "${settings[@]}" "$build/tools/commxrun/commxrun" -n "$ranks" --timeout 300 \
      "${exe[@]}" --steps "$steps"
  fi
}
baseline_of() { echo "mpi_raw/${1#*/}"; }
md_rounds "$rounds"
md_table baseline_of
