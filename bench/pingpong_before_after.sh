#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Ping-pong (8 B, 64 KiB, 1 MiB half round trips) of the same stacks built from two trees, run
# in interleaved rounds on this machine, so that a change's cost is measured side by side:
#   bash bench/pingpong_before_after.sh <before build dir> <after build dir> [rounds] [stacks]
# Each build dir is a release build with bench_pingpong_<stack> and commxrun built. Prints the
# median over the rounds of each build's per-round time, and after/before. PINGPONG_FILTER
# chooses other benchmarks of the program (bandwidth/..., reported in MB/s).
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
rounds=${3:-5}
stacks=${4:-inproc shm tcp}
out=results/bench/before_after
mkdir -p "$out"
filter=${PINGPONG_FILTER:-'pingpong/[^/]+/(8|65536|1048576)/'}
common=(--benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_out_format=json)
run() {  # build stack round label
  local bench=$1/bench/bench_pingpong_$2
  if [[ $2 == inproc ]]; then
    COMMX_INPROC_RANKS=2 "$bench" "${common[@]}" --benchmark_out="$out/$2.$4.$3.json" >/dev/null
  else
    "$1/tools/commxrun/commxrun" -n 2 --timeout 300 "$bench" "${common[@]}" \
      --benchmark_out="$out/$2.$4.$3.json" >/dev/null
  fi
}
for ((r = 1; r <= rounds; r++)); do
  for stack in $stacks; do
    # Alternate which build goes first, so neither always runs on a warmer machine.
    if ((r % 2)); then
      run "$before" "$stack" "$r" before
      run "$after" "$stack" "$r" after
    else
      run "$after" "$stack" "$r" after
      run "$before" "$stack" "$r" before
    fi
  done
done
python3 - "$out" "$rounds" "$stacks" <<'PY'
import json, os, statistics, sys
out, rounds, stacks = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print(f"load average {os.getloadavg()}; medians of {rounds} interleaved rounds, "
      "us per half round trip (ping-pong) or MB/s (bandwidth)")
print("| stack | benchmark | bytes | before | after | after/before |")
print("|---|---|---|---|---|---|")
for stack in stacks:
    times = {}
    for label in ("before", "after"):
        for r in range(1, rounds + 1):
            with open(f"{out}/{stack}.{label}.{r}.json") as f:
                for b in json.load(f)["benchmarks"]:
                    kind, _, size = b["name"].split("/")[:3]
                    value = (b["half_rtt"] * 1e6 if "half_rtt" in b
                             else b["bytes_per_second"] / 1e6)
                    times.setdefault((label, kind, int(size)), []).append(value)
    for kind, size in sorted({(k, s) for _, k, s in times}):
        t0 = statistics.median(times[("before", kind, size)])
        t1 = statistics.median(times[("after", kind, size)])
        print(f"| {stack} | {kind} | {size} | {t0:.3f} | {t1:.3f} | {t1 / t0:.2f}x |")
PY
