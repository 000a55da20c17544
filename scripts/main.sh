#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs what is missing, builds every md_replicated variant (one per stack and
# collectives policy) optimised, runs each on LAMMPS's in.lj (32000 atoms, 100 steps) at 1, 2
# and 4 ranks, and prints the comparison table; writes results/md/comparison.{csv,png}.
# Extra arguments go to the driver (scripts/md_compare.py --help), e.g. --budget 400.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
echo "=== building md_replicated for every stack and policy (release)"
cmake --build --preset release -j "$(nproc)" --target md_replicated_all commxrun bench_pingpong_all

# Debian's python3, which python3-matplotlib is installed for (a python3 earlier on PATH, e.g.
# from pyenv, would not see it).
python=/usr/bin/python3
[[ -x $python ]] || python=python3
exec "$python" scripts/md_compare.py --build-dir build/release --results results/md "$@"
