#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A job started by Open MPI's mpirun (as a launcher only) with no COMMX_ROOT: the network
# stacks take their endpoints from mpirun's PMIx server (bootstrap/pmix.hpp).
#   pmix_launch.sh <mpirun> <N> <ranks per node, 0: one node> <program> [args...]
# With a node size k > 0 each rank names node r / k (COMMX_NODE), as commxrun --nodes does,
# so shm+tcp has several nodes on this machine. COMMX_TOKEN passes through when set; unset,
# rank 0 draws the job's secret and hands it out through PMIx. Bounded by timeout(1).
set -euo pipefail
mpirun=$1
ranks=$2
per_node=$3
shift 3
unset COMMX_ROOT COMMX_RANK COMMX_SIZE COMMX_RANK_BASE COMMX_JOB_SIZE COMMX_NODE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks outnumber the cores here: Open MPI's own waits yield, and mpirun does not bind.
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_hwloc_base_binding_policy=none
if ((per_node > 0)); then
  exec timeout -k 10 "${COMMX_TEST_LAUNCH_SECONDS:-200}" "$mpirun" --oversubscribe -np "$ranks" \
    sh -c 'COMMX_NODE=node$((OMPI_COMM_WORLD_RANK / $0)) exec "$@"' "$per_node" "$@"
fi
exec timeout -k 10 "${COMMX_TEST_LAUNCH_SECONDS:-200}" "$mpirun" --oversubscribe -np "$ranks" "$@"
