#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One-sided communication side by side: commx's windows and active messages on shm (and tcp,
# and ucx over UCX's shared memory, UCX_TLS=posix,cma,self, where built) against Open MPI's and
# MPICH's MPI-3 RMA (bench/onesided_mpi.cpp; MPICH's over UCX too), at 2 and 4 ranks,
# interleaved round by round; prints medians over the rounds and commx / best MPI:
#   bash bench/onesided_vs_mpi.sh [rounds] [iterations]   (after: cmake --preset release && build)
# Builds the MPI driver against MPICH by hand (mpicxx.mpich) into build/mpich/. Raw lines go to
# results/bench/onesided/, the summary to results/bench/onesided/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
iterations=${2:-2000}
release=build/release
out=results/bench/onesided
mkdir -p "$out" build/mpich
rm -f "$out"/*.txt
commxrun=$release/tools/commxrun/commxrun
mpich_bench=build/mpich/bench_mpi_onesided
if [[ ! -x $mpich_bench || bench/onesided_mpi.cpp -nt $mpich_bench ]]; then
  mpicxx.mpich -O2 -DNDEBUG -std=c++20 -DMPICH_SKIP_MPICXX=1 -Ibench bench/onesided_mpi.cpp \
    -o "$mpich_bench"
fi
for ((r = 1; r <= rounds; r++)); do
  for n in 2 4; do
    "$commxrun" -n "$n" --timeout 300 "$release/bench/bench_onesided_shm" "$iterations" \
      | sed 's/^\[0\] //' >> "$out/shm.np$n.txt"
    "$commxrun" -n "$n" --timeout 300 "$release/bench/bench_onesided_tcp" "$iterations" \
      | sed 's/^\[0\] //' >> "$out/tcp.np$n.txt"
    if [[ -x $release/bench/bench_onesided_ucx ]]; then
      UCX_TLS=posix,cma,self "$commxrun" -n "$n" --timeout 300 \
        "$release/bench/bench_onesided_ucx" "$iterations" 2> /dev/null |
        sed 's/^\[0\] //' >> "$out/ucx.np$n.txt"
    fi
    mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
      "$release/bench/bench_mpi_onesided" "$iterations" >> "$out/openmpi.np$n.txt" 2> /dev/null
    mpiexec.mpich -n "$n" "$mpich_bench" "$iterations" >> "$out/mpich.np$n.txt" 2> /dev/null
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
out = sys.argv[1]
import os
libs = ["shm", "tcp", "ucx", "openmpi", "mpich"]
rows = collections.defaultdict(dict)
units = {}
for n in (2, 4):
    for lib in libs:
        values = collections.defaultdict(list)
        path = f"{out}/{lib}.np{n}.txt"
        if not os.path.exists(path):  # ucx, where not built
            continue
        for line in open(path):
            parts = line.split()
            if len(parts) != 6 or parts[0] != "result":
                continue
            _, measure, size, _, value, unit = parts
            values[(measure, int(size), n)].append(float(value))
            units[measure] = unit
        for key, v in values.items():
            rows[key][lib] = statistics.median(v)
higher_better = {"accumulate_rate", "busy_target_gets"}
header = ["measure", "bytes", "ranks", "unit", "commx shm", "commx tcp", "commx ucx (sm)",
          "Open MPI", "MPICH", "shm / best MPI", "ucx / MPICH"]
lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
table = []
for (measure, size, n), got in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
    mpis = [got[m] for m in ("openmpi", "mpich") if m in got]
    cells = [f"{got[lib]:.3g}" if lib in got else "-" for lib in libs]
    ratio = "-"
    if "shm" in got and mpis and measure not in ("busy_target_gets", "am_round_trip"):
        best = max(mpis) if measure in higher_better else min(mpis)
        ratio = f"{got['shm'] / best:.2f}" if best else "-"
    same_ucx = "-"  # ucx against MPICH, one UCX under both
    if "ucx" in got and got.get("mpich") and measure not in ("busy_target_gets", "am_round_trip"):
        same_ucx = f"{got['ucx'] / got['mpich']:.2f}"
    lines.append(f"| {measure} | {size} | {n} | {units[measure]} | " + " | ".join(cells) +
                 f" | {ratio} | {same_ucx} |")
    table.append([measure, str(size), str(n), units[measure], *cells, ratio, same_ucx])
text = "\n".join(lines)
print(text)
open(f"{out}/summary.md", "w").write(text + "\n")
import csv  # the table as CSV too, for bench/current_figures.py
with open(f"{out}/summary.csv", "w", newline="") as f:
    csv.writer(f).writerows([header, *table])
PY
