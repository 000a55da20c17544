#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# An 8-byte ping-pong between ranks 0 and 1 of a 128-rank shm job, beside a 2-rank job's, for
# builds side by side (bench/README.md, "Two ranks of a 128-rank shm job"):
#   bash bench/crowd_pingpong.sh ROUNDS OUT.txt BUILD_DIR [BUILD_DIR...]
# Each round runs, for each build (their order alternating round by round), with waits as they
# come (COMMX_SHM_SPIN=auto) and spinning (2000 polls, as a rank with a core of its own):
# 2 ranks; 128 ranks whose others leave at once; 128 ranks whose others first hear from every
# rank (PINGPONG_ALL_TALKED=1) and then wait. Rank r is pinned to CPU r mod the CPUs. A line per
# run: round, build, spin, ranks, all talked, the VM's cache-line half round trip in ns before
# the run (bench_cache_line: under 100 one die, over 150 two), the half round trip in ns, the
# load average.
set -euo pipefail
rounds=$1
out=$2
shift 2
builds=("$@")
here=$(cd "$(dirname "$0")" && pwd)
: >"$out"
for round in $(seq 1 "$rounds"); do
  order=("${builds[@]}")
  if ((round % 2 == 0)); then mapfile -t order < <(printf '%s\n' "${builds[@]}" | tac); fi
  for build in "${order[@]}"; do
    bench=$(cd "$build/bench" && pwd)
    run=$(cd "$build/tools/commxrun" && pwd)/commxrun
    for spin in auto 2000; do
      for shape in "2 0" "128 0" "128 1"; do
        read -r ranks talked <<<"$shape"
        mode=$("$bench/bench_cache_line" 2>/dev/null | grep -o 'half_rtt=[0-9.]*' | cut -d= -f2)
        half=$(cd "$bench" && PINGPONG_ALL_TALKED=$talked COMMX_SHM_SPIN=$spin PIN_RANK0_CPU=0 \
          timeout 300 "$run" -n "$ranks" "$here/pin_rank.sh" ./bench_pingpong_shm \
          --benchmark_filter=pingpong/commx-shm/8/ --benchmark_min_time=0.3 2>&1 |
          grep -o 'half_rtt=[0-9.]*' | cut -d= -f2 || true)
        load=$(cut -d' ' -f1 /proc/loadavg)
        echo "$round $build $spin $ranks $talked $mode ${half:-FAIL} $load" >>"$out"
      done
    done
  done
done
# Medians per VM mode (one die before the run: under 100 ns; two: over 150), waits, shape and
# build, in us.
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, build, spin, ranks, talked, mode, half, _ = line.split()
    if half == "FAIL":
        print("failed:", line.strip())
        continue
    vm = "one die" if float(mode) < 100 else "two dies" if float(mode) > 150 else "between"
    shape = {"2": "2 ranks", "0": "128, others left", "1": "128 after an alltoall"}
    runs[(vm, spin, shape[talked if ranks == "128" else ranks], build)].append(float(half) / 1e3)
for key in sorted(runs):
    print(" | ".join(key), "|", f"{statistics.median(runs[key]):.3f}", f"({len(runs[key])} runs)")
PY
