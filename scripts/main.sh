#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs what is missing, builds md_replicated optimised for every stack (each
# program holds every collectives policy), runs each stack and policy on LAMMPS's in.lj (32000
# atoms, 100 steps) at 1, 2 and 4 ranks, and prints the comparison table; writes
# results/md/comparison.{csv,png} and policies.png. Then the
# N-body example in each arrangement (one job; two sites in one communicator; as root, each site
# its own job over an emulated 50 ms link with relays): results/nbody/ (scripts/nbody_compare.py).
# Every row runs, the MPI baseline (md_replicated_mpi_raw) first. Extra arguments go to the MD
# driver (scripts/md_compare.py --help), e.g. --budget 400 to skip what would start later.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
echo "=== packages ready after ${SECONDS} s"
source scripts/compiler_cache.sh
cmake --preset release >/dev/null
# Measured on 2 cores from a fresh clone (2026-12-01, g++ 12, ccache warm but for the headers
# that day's changes touched): 488 s of building the programs below, ucx's among them, then
# 260 s of runs; from nothing cached the build takes longer (bench/README.md, "The main job's
# time", is the last cold measurement, before the ucx programs).
cores=$(nproc)
build_minutes=$(( (976 / cores + 59) / 60 ))
echo "=== expect about $(( build_minutes + 5 )) minutes: building ~${build_minutes} min on ${cores} cores (less with a warm ccache), then ~5 min of runs"
echo "=== building md_replicated for every stack, nbody_wide, the ping-pongs (release)"
cmake --build --preset release -j "$(nproc)" --target md_replicated_all commxrun bench_pingpong_all \
  nbody_wide_all wanemu commx-relay bench_cache_line
echo "=== built after ${SECONDS} s"

# Debian's python3, which python3-matplotlib is installed for (a python3 earlier on PATH, e.g.
# from pyenv, would not see it).
python=/usr/bin/python3
[[ -x $python ]] || python=python3
"$python" scripts/md_compare.py --build-dir build/release --results results/md "$@"
echo "=== nbody_wide in each arrangement (${SECONDS} s so far)"
"$python" scripts/nbody_compare.py --build-dir build/release --results results/nbody
echo "=== the main job took ${SECONDS} s"
