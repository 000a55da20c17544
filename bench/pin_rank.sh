#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a command pinned to one CPU chosen by its rank, for benchmarks that compare libraries
# rank placement for rank placement:
#   PIN_RANK0_CPU=c bench/pin_rank.sh program args...
# Rank r (COMMX_RANK, OMPI_COMM_WORLD_RANK or PMI_RANK) goes to CPU (c + r) mod the CPUs online.
# On the 2-core VM the benchmarks run on, which CPU rank 0 gets decides an 8-byte message rate
# by up to 1.5x, for commx and Open MPI alike (bench/HISTORY.md); Open MPI binds rank 0 to core 0
# by default and commxrun binds nothing, so unpinned runs compare different placements.
set -euo pipefail
rank=${COMMX_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}}
cpus=$(nproc --all)
exec taskset -c "$(((${PIN_RANK0_CPU:-0} + rank) % cpus))" "$@"
