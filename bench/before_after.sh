#!/bin/bash
# SPDX-License-Identifier: MIT
# What a change costs when nothing it adds is used: two release builds (before and after)
# side by side, in interleaved rounds: 8-byte ping-pong half round trip and 8-byte rate on shm
# and tcp (bench_pingpong_<stack>, 2 ranks), and MD per step (md_replicated_shm, 32,000 atoms,
# 2 ranks, tuned), each run pinned (bench/pin_rank.sh), every round in both placements of
# rank 0. Prints one line per run and, at the end, for each of the VM's modes, the median over
# rounds of each round's ratio after / before (the geometric mean of its two placements') and
# the change's cost: that ratio for times, its inverse for rates, with the cost's 95% interval
# (the sign test's, scripts/pmb_report.py's median_interval): "within" BOUND (1% by default,
# issue 50's goal) when the whole interval is at most 1 + BOUND, "over" when all of it is above,
# and "cannot tell" when it straddles the bound.
#
#   bash bench/before_after.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS] [BOUND]
#   (each: cmake --build DIR --target bench_pingpong_shm bench_pingpong_tcp md_replicated_shm
#    commxrun; the VM's mode is read with LINE_PROBE, by default build/release's
#    bench_cache_line, before and after each round: a round whose two readings disagree is
#    counted apart as "mixed")
set -euo pipefail
before=$1 after=$2 rounds=${3:-6} bound=${4:-0.01}
here=$(cd "$(dirname "$0")" && pwd)
probe=${LINE_PROBE:-$here/../build/release/bench/bench_cache_line}
[[ -x $probe ]] || { echo "before_after: $probe not built (or set LINE_PROBE)" >&2; exit 2; }
line_ns() { "$probe" 2>/dev/null | grep -o 'half_rtt=[0-9.]*' | cut -d= -f2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pin=$here/pin_rank.sh
for round in $(seq "$rounds"); do
  line=$(line_ns)
  for cpu in 0 1; do  # both placements of rank 0: which CPU it gets moves an 8 B rate 1.5x
    order="before after"; (( (round + cpu) % 2 == 0 )) && order="after before"  # turns
    for which in $order; do
      build=$before; [[ $which == after ]] && build=$after
      # The launcher is not measured: the after build's launches both.
      run=("$after/tools/commxrun/commxrun" -n 2 --timeout 300 env PIN_RANK0_CPU=$cpu "$pin")
      at="round=$round cpu=$cpu which=$which"
      for stack in shm tcp; do
        out=$("${run[@]}" "$build/bench/bench_pingpong_$stack" --benchmark_min_time=0.3 \
                --benchmark_filter='^(pingpong|bandwidth)/commx-[a-z]*/8/' 2>&1)
        rtt=$(grep -o 'half_rtt=[0-9.]*[mun]*s' <<<"$out" | head -1 | cut -d= -f2)
        rate=$(grep '/bandwidth/\|\] bandwidth/' <<<"$out" |
               grep -o 'bytes_per_second=[0-9.]*[kMG]*' | cut -d= -f2)
        echo "$at measure=${stack}_half_rtt value=$rtt" | tee -a "$log"
        echo "$at measure=${stack}_rate value=$rate" | tee -a "$log"
      done
      md=$("${run[@]}" "$build/examples/md_replicated/md_replicated_shm" --atoms-cells 20 \
             --steps 100 --thermo-every 10 --collectives tuned 2>&1 |
           grep -o 'time_per_step_ms=[0-9.]*' | cut -d= -f2)
      echo "$at measure=md_ms value=$md load=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$log"
    done
  done
  echo "round=$round line_before=$line line_after=$(line_ns)" | tee -a "$log"
done
python3 - "$log" "$bound" "$here/../scripts" <<'PY'
import re, statistics, sys
sys.path.insert(0, sys.argv[3])
from launching import line_mode
from pmb_report import median_interval
bound = float(sys.argv[2])
scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}
def number(text):
    m = re.match(r"([0-9.]+)([a-zA-Z]*)", text)
    return float(m.group(1)) * scale.get(m.group(2), 1)
runs, mode = {}, {}
for line in open(sys.argv[1]):
    kv = dict(item.split("=", 1) for item in line.split())
    if "line_before" in kv:
        mode[kv["round"]] = {"fast": "one die", "slow": "two dies", "mixed": "mixed"}[
            line_mode(float(kv["line_before"]), float(kv["line_after"]))]
    else:
        key = (kv["measure"], kv["round"])
        runs.setdefault(key, {}).setdefault(kv["cpu"], {})[kv["which"]] = number(kv["value"])
def round_ratio(placements):
    """The geometric mean over the round's placements of after / before (None if one is
    missing a run)."""
    pairs = [p for p in placements.values() if len(p) == 2]
    if len(pairs) != len(placements):
        return None
    return statistics.geometric_mean(p["after"] / p["before"] for p in pairs)
for which_mode in ("two dies", "one die", "mixed"):
    for measure in sorted({m for m, _ in runs}):
        ratios = [x for (m, r), v in runs.items()
                  if m == measure and mode.get(r) == which_mode
                  and (x := round_ratio(v)) is not None]
        if not ratios:
            continue
        # What the change costs: after / before for times, before / after for rates.
        costs = [1 / x for x in ratios] if measure.endswith("_rate") else ratios
        interval = median_interval(costs)
        if interval is None:
            verdict, shown = "cannot tell", "too few rounds for an interval"
        else:
            verdict = ("within" if interval[1] <= 1 + bound else
                       "over" if interval[0] > 1 + bound else "cannot tell")
            shown = f"95% {interval[0]:.3f}-{interval[1]:.3f}"
        print(f"{which_mode}: {measure}: after / before {statistics.median(ratios):.3f}, "
              f"cost {statistics.median(costs):.3f} ({shown}; {len(ratios)} rounds): "
              f"{verdict} {bound:.0%}")
PY
