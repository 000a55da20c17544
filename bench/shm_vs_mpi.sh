#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Ping-pong and bandwidth on commx's shm transport (the default: cma, a one-way copy shared by
# both ends; the receiver reading alone; the pipelined pieces), Open MPI and MPICH (each as
# installed, and each told to yield while it polls), interleaved round by round on this machine
# so that their ratios are measured side by side, every run pinned, in both placements of rank
# 0 (bench/pin_rank.sh); and a cache line's crossing between the two CPUs, the floor under all:
#   bash bench/shm_vs_mpi.sh [rounds]          (after: cmake --preset release && build)
# Builds the raw-MPI driver against MPICH by hand (mpicxx.mpich) into build/mpich/ when no
# MPICH build of it exists. JSON per run goes to results/bench/shm/; the summary (medians over
# the rounds and placements, and ratios) is printed and written to results/bench/shm/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
release=build/release
out=results/bench/shm
mkdir -p "$out" build/mpich
filter='(pingpong|bandwidth)/[^/]+/(8|32768|1048576|4194304)/'
# A warm-up first: the first window of 4 MiB messages costs an MPI up to 0.5 s (first use of
# its large-message path), longer than a whole timed run.
common=(--benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_min_warmup_time=0.1
        --benchmark_out_format=json)
mpich_bench=build/mpich/bench_mpi_pingpong
if [[ ! -x $mpich_bench || bench/mpi_pingpong_bench.cpp -nt $mpich_bench ]]; then
  mpicxx.mpich -O2 -DNDEBUG -std=c++20 -DMPICH_SKIP_MPICXX=1 -Ibench \
    bench/mpi_pingpong_bench.cpp -lbenchmark -lpthread -o "$mpich_bench"
fi
# Every run is pinned (bench/pin_rank.sh), each round in both placements of rank 0.
pin=bench/pin_rank.sh
for ((r = 1; r <= rounds; r++)); do
  for first in 0 1; do
    export PIN_RANK0_CPU=$first
    at=$r.$first
    "$release/tools/commxrun/commxrun" -n 2 --timeout 300 "$pin" \
      "$release/bench/bench_pingpong_shm" "${common[@]}" --benchmark_out="$out/shm.$at.json" \
      > /dev/null
    # The receiver reading alone (as before 2026-12-05), and the pieces through the rings.
    COMMX_SHM_SHARED_COPY=off "$release/tools/commxrun/commxrun" -n 2 --timeout 300 "$pin" \
      "$release/bench/bench_pingpong_shm" "${common[@]}" \
      --benchmark_out="$out/shm-alone.$at.json" > /dev/null
    COMMX_SHM_LARGE=copy "$release/tools/commxrun/commxrun" -n 2 --timeout 300 "$pin" \
      "$release/bench/bench_pingpong_shm" "${common[@]}" \
      --benchmark_out="$out/shm-copy.$at.json" > /dev/null
    mpirun.openmpi --allow-run-as-root --bind-to none -x PIN_RANK0_CPU -np 2 "$pin" \
      "$release/bench/bench_mpi_pingpong" "${common[@]}" \
      --benchmark_out="$out/openmpi.$at.json" > /dev/null 2>&1
    mpiexec.mpich -bind-to none -n 2 "$pin" "$mpich_bench" "${common[@]}" \
      --benchmark_out="$out/mpich.$at.json" > /dev/null 2>&1
    # Both MPIs poll without pause by default; on a loaded machine yielding may serve them
    # better.
    mpirun.openmpi --allow-run-as-root --bind-to none -x PIN_RANK0_CPU --mca mpi_yield_when_idle \
      1 -np 2 "$pin" "$release/bench/bench_mpi_pingpong" "${common[@]}" \
      --benchmark_out="$out/openmpi-yield.$at.json" > /dev/null 2>&1
    MPIR_CVAR_POLLS_BEFORE_YIELD=1 mpiexec.mpich -bind-to none -n 2 "$pin" "$mpich_bench" \
      "${common[@]}" --benchmark_out="$out/mpich-yield.$at.json" > /dev/null 2>&1
  done
  # The floor under them: one cache line crossing between CPUs 0 and 1 (issue 20 aims shm's
  # 8-byte half round trip at twice it).
  "$release/bench/bench_cache_line" --benchmark_out_format=json \
    --benchmark_out="$out/cache-line.$r.json" > /dev/null 2>&1
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
libs = ["shm", "shm-alone", "shm-copy", "openmpi", "mpich", "openmpi-yield", "mpich-yield"]
def load(lib):
    rows = {}
    for r in range(1, rounds + 1):
        for first in (0, 1):
            for b in json.load(open(f"{out}/{lib}.{r}.{first}.json"))["benchmarks"]:
                what, _, size = b["name"].split("/")[:3]
                value = (b["half_rtt"] * 1e6 if what == "pingpong"
                         else b["bytes_per_second"] / 1e9)
                rows.setdefault((what, int(size)), []).append(value)
    return {k: statistics.median(v) for k, v in rows.items()}
data = {lib: load(lib) for lib in libs}
lines = ["| measure | shm | shm (COMMX_SHM_SHARED_COPY=off) | shm (COMMX_SHM_LARGE=copy) | "
         "Open MPI | MPICH | Open MPI (yield) | MPICH (yield) | shm / best MPI | shm / alone |",
         "|---|---|---|---|---|---|---|---|---|---|"]
table = []  # also as CSV, for bench/current_figures.py
for key in sorted(data["shm"]):
    what, size = key
    unit = "us half RTT" if what == "pingpong" else "GB/s"
    vals = [data[lib].get(key, float("nan")) for lib in libs]
    better = min(vals[3:]) if what == "pingpong" else max(vals[3:])
    cells = [f"{what} {size} B ({unit})"] + [f"{v:.3g}" for v in vals] + \
        [f"{vals[0] / better:.2f}", f"{vals[0] / vals[1]:.2f}"]
    table.append(cells)
    lines.append("| " + " | ".join(cells) + " |")
line = statistics.median(
    b["half_rtt"] * 1e6 for r in range(1, rounds + 1)
    for b in json.load(open(f"{out}/cache-line.{r}.json"))["benchmarks"])
shm_8 = data["shm"][("pingpong", 8)]
lines.append("")
lines.append(f"A cache line between CPUs 0 and 1: {line * 1e3:.1f} ns (bench_cache_line, median "
             f"of {rounds}); shm's 8-byte half round trip is {shm_8 / line:.2f}x it "
             f"(issue 20 aims at 2x).")
text = "\n".join(lines)
print(text)
open(f"{out}/summary.md", "w").write(text + "\n")
import csv
with open(f"{out}/summary.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["measure"] + libs + ["shm / best MPI", "shm / alone"])
    writer.writerows(table)
PY
