#!/bin/bash
# SPDX-License-Identifier: MIT
# What a change costs when nothing it adds is used: two release builds (before and after)
# side by side, in interleaved rounds: 8-byte ping-pong half round trip and 8-byte rate on shm
# and tcp (bench_pingpong_<stack>, 2 ranks), and MD per step (md_replicated_shm, 32,000 atoms,
# 2 ranks, tuned). Prints one line per run and, at the end, the median over rounds of each
# round's ratio after / before.
#
#   bash bench/before_after.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]
#   (each: cmake --build DIR --target bench_pingpong_shm bench_pingpong_tcp md_replicated_shm
#    bench_cache_line)
set -euo pipefail
before=$1 after=$2 rounds=${3:-6}
log=$(mktemp)
for round in $(seq "$rounds"); do
  line=$("$after/bench/bench_cache_line" 2>/dev/null | grep -o 'half_rtt=[0-9.]*' | cut -d= -f2)
  order="before after"; (( round % 2 == 0 )) && order="after before"  # neither always first
  for which in $order; do
    build=$before; [[ $which == after ]] && build=$after
    run="$after/tools/commxrun/commxrun -n 2 --timeout 300"  # the launcher is not measured
    for stack in shm tcp; do
      out=$($run "$build/bench/bench_pingpong_$stack" --benchmark_min_time=0.3 \
              --benchmark_filter='^(pingpong|bandwidth)/commx-[a-z]*/8/' 2>&1)
      rtt=$(grep -o 'half_rtt=[0-9.]*[mun]*s' <<<"$out" | head -1 | cut -d= -f2)
      rate=$(grep '/bandwidth/\|\] bandwidth/' <<<"$out" | grep -o 'bytes_per_second=[0-9.]*[kMG]*' | cut -d= -f2)
      echo "round=$round line_ns=$line which=$which measure=${stack}_half_rtt value=$rtt" | tee -a "$log"
      echo "round=$round line_ns=$line which=$which measure=${stack}_rate value=$rate" | tee -a "$log"
    done
    md=$($run "$build/examples/md_replicated/md_replicated_shm" --atoms-cells 20 --steps 100 \
           --thermo-every 10 --collectives tuned 2>&1 | grep -o 'time_per_step_ms=[0-9.]*' | cut -d= -f2)
    echo "round=$round line_ns=$line which=$which measure=md_ms value=$md load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$log"
  done
done
python3 - "$log" <<'PY'
import re, statistics, sys
scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}
def number(text):
    m = re.match(r"([0-9.]+)([a-zA-Z]*)", text)
    return float(m.group(1)) * scale.get(m.group(2), 1)
runs = {}
for line in open(sys.argv[1]):
    kv = dict(item.split("=", 1) for item in line.split())
    runs.setdefault((kv["measure"], kv["round"]), {})[kv["which"]] = number(kv["value"])
for measure in sorted({m for m, _ in runs}):
    pairs = [v for (m, _), v in runs.items() if m == measure and len(v) == 2]
    ratio = statistics.median(v["after"] / v["before"] for v in pairs)
    print(f"{measure}: after / before {ratio:.3f} (median of {len(pairs)} rounds' ratios)")
PY
rm -f "$log"
