#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the PMB/IMB set (seed 002) side by side on every stack: commx's policies in-process
# (bench_collectives) and on every stack whose ranks are processes (bench_pmb_<stack>), and
# Open MPI's own collectives over its default transports and over TCP only
# (bench_mpi_collectives), at 2 and 4 ranks in interleaved rounds (scripts/pmb_sweep.py).
# Then prints the comparison per stack (scripts/pmb_report.py) and writes the coll::tuned
# table each stack's runs imply (scripts/tune_collectives.py). Results: results/bench/.
#   bash scripts/bench.sh [ROUNDS]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

cmake --preset release --fresh >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_collectives bench_mpi_collectives \
  bench_pmb_all commxrun

out=results/bench
rm -rf "$out"
python3 scripts/pmb_sweep.py --results "$out" --rounds "${1:-5}" | tee "$out.log"
mv "$out.log" "$out/sweep.log"
python3 scripts/pmb_report.py "$out"/round*/*.json | tee "$out/pmb.txt"
mkdir -p "$out/tuned_tables"
for stack in inproc shm tcp wan mpi ucx; do
  compgen -G "$out/round*/$stack-np*.json" > /dev/null || continue  # not built here (ucx)
  # The shipped table's rules above the rank counts swept here stay (measured up to 32).
  python3 scripts/tune_collectives.py --stack "$stack" \
    --keep "include/commx/coll/tuned_tables/$stack.hpp" "$out"/round*/"$stack"-np*.json \
    > "$out/tuned_tables/$stack.hpp"
done
echo "=== tuned tables: $out/tuned_tables/*.hpp (copy to include/commx/coll/tuned_tables/ to adopt)"
