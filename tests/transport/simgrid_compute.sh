#!/bin/bash
# SPDX-License-Identifier: MIT
# simgrid_compute.sh PROGRAM RANKS: runs `PROGRAM compute` (simgrid_job.cpp) with compute
# measured and with it skipped, and fails unless rank 0's 2 ms of CPU time became at least
# 2 simulated ms (and none when skipped), and back-to-back allreduces cost at most twice
# their skipped time when measured: the calls' own work, and the clock readings that measure
# compute, are not charged as the program's compute (8.5 times, 45 against 5.3 us, before).
set -euo pipefail
program=$1
ranks=$2
measured=$(COMMX_SIMGRID_COMPUTE=measured COMMX_SIMGRID_RANKS=$ranks timeout 120 "$program" compute)
skipped=$(COMMX_SIMGRID_COMPUTE=skip COMMX_SIMGRID_RANKS=$ranks timeout 120 "$program" compute)
echo "measured: $measured"
echo "skipped:  $skipped"
field() { sed -n "s/.*$2=\([0-9.e+-]*\).*/\1/p" <<<"$1"; }
python3 - "$(field "$measured" busy_s)" "$(field "$skipped" busy_s)" \
  "$(field "$measured" per_call_s)" "$(field "$skipped" per_call_s)" <<'PY'
import sys
busy_measured, busy_skipped, call_measured, call_skipped = map(float, sys.argv[1:])
failures = []
if busy_measured < 0.002:
    failures.append(f"2 ms of compute became {busy_measured * 1e3:.3f} simulated ms")
if busy_skipped >= 0.001:
    failures.append(f"skipped compute still took {busy_skipped * 1e3:.3f} simulated ms")
if not 0 < call_measured <= 2 * call_skipped:
    failures.append(f"an allreduce took {call_measured * 1e6:.2f} simulated us measured, "
                    f"{call_skipped * 1e6:.2f} skipped")
for f in failures:
    print("simgrid_compute:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
