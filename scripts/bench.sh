#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the benchmarks side by side: commx's policies (bench_collectives) and Open MPI's own
# collectives (bench_mpi_collectives under mpirun), the PMB/IMB set at 2 and 4 ranks, then
# prints the comparison table and the tuned table those runs imply. Results: results/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

cmake --preset release --fresh >/dev/null
cmake --build --preset release -j "$(nproc)" --target bench_collectives bench_mpi_collectives bench_p2p

out=results/bench
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 2 4; do
  echo "=== commx policies, ${np} ranks"
  PMB_RANKS=$np ./build/release/bench/bench_collectives \
    --benchmark_out="$out/commx-np$np.json" --benchmark_out_format=json >/dev/null
  echo "=== Open MPI, ${np} ranks"
  timeout 1200 mpirun -np "$np" --oversubscribe ./build/release/bench/bench_mpi_collectives \
    --benchmark_out="$out/openmpi-np$np.json" --benchmark_out_format=json >/dev/null
done

python3 scripts/pmb_report.py "$out"/commx-np*.json "$out"/openmpi-np*.json | tee "$out/pmb.txt"
python3 scripts/tune_collectives.py "$out"/commx-np*.json > "$out/tuned_table.hpp"
echo "=== proposed tuned table: $out/tuned_table.hpp (copy to include/commx/coll/ to adopt)"
