#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One short round of scripts/pmb_sweep.py over shm and tcp, then the table for each stack from
# it: the path by which coll::tuned's tables are remade, run end to end on real processes.
#   pmb_sweep_run.sh BUILD_DIR RESULTS_DIR
set -euo pipefail
build=$1
out=$2
scripts="$(dirname "$0")/../../scripts"
rm -rf "$out"
# Waiting for a mode the VM may never take is bounded (--mode-wait): the runs go on after it.
python3 "$scripts/pmb_sweep.py" --build-dir "$build" --results "$out" --rounds 1 --ranks 2 \
  --stacks shm tcp --filter '^(Allreduce|Bcast)/.*/(8|65536)/' --timeout 120 \
  --mode slow --mode-wait 4
for stack in shm tcp; do
  python3 "$scripts/tune_collectives.py" --stack "$stack" "$out"/round1/"$stack"-np2.json \
    > "$out/$stack.hpp"
  # Both collectives at both sizes were measured, so the table has a rule for each.
  grep -q "inline constexpr std::array tuned_rules_$stack{" "$out/$stack.hpp"
  grep -q "stats::op::allreduce, 1, 0, algorithm::" "$out/$stack.hpp"
  grep -q "stats::op::bcast, 1, 0, algorithm::" "$out/$stack.hpp"
done
# (Into a file: grep -q would stop reading at the first match, and the report's next write
# would fail with a broken pipe.)
python3 "$scripts/pmb_report.py" "$out"/round1/*.json > "$out/report.txt"
grep -q "=== commx tcp" "$out/report.txt"
# The round's mode: a cache line timed before and after it, where the build has the bench.
if [[ -x "$build/bench/bench_cache_line" ]]; then
  grep -Eq '^cache_line_ns [0-9.]+ [0-9.]+$' "$out/round1/mode.txt"
  grep -q "rounds by the VM's mode" "$out/report.txt"
fi
# Once more with every call's input written before it (PMB_FRESH_INPUT=1, bench/pmb.hpp).
PMB_FRESH_INPUT=1 python3 "$scripts/pmb_sweep.py" --build-dir "$build" --results "$out/fresh" \
  --rounds 1 --ranks 2 --stacks shm tcp --filter '^Allgather/.*/65536/' --timeout 120
python3 "$scripts/pmb_report.py" "$out"/fresh/round1/*.json > "$out/fresh/report.txt"
grep -Eq '^ +Allgather +2 +65536 ' "$out/fresh/report.txt"
# MPICH's collectives beside shm's where MPICH is installed (the sweep compiles its driver):
# the report has a column for it, with a time on the point.
if command -v mpicxx.mpich > /dev/null; then
  python3 "$scripts/pmb_sweep.py" --build-dir "$build" --results "$out/mpich" --rounds 1 \
    --ranks 2 --stacks shm mpich --filter '^Allreduce/.*/8/' --timeout 120
  python3 "$scripts/pmb_report.py" "$out"/mpich/round1/*.json > "$out/mpich/report.txt"
  grep -Eq '^ +bench +np +bytes .* mpich ' "$out/mpich/report.txt"
  grep -Eq '^ +Allreduce +2 +8 +([0-9.]+ +)+' "$out/mpich/report.txt"
fi
echo "pmb_sweep_run: tables for shm and tcp made from one round"
