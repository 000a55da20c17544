#!/bin/bash
# SPDX-License-Identifier: MIT
# simgrid_compute.sh PROGRAM RANKS: runs `PROGRAM compute` (simgrid_job.cpp) with compute
# measured and with it skipped, and fails unless rank 0's 2 ms of CPU time was charged as at
# least 2 ms of compute and made its barrier take that long (and neither when skipped), and
# 100 back-to-back allreduces charged a rank 200 us in all or less on average: commx's own
# work, and the clock readings that measure compute, are not the program's compute (before,
# each transport call charged a reading's cost, over 1.2 us, and its noise: 45 simulated us an
# allreduce, 5.3 skipped). On average: a loaded machine's noise (a page fault, a stolen
# slice) lands on some rank of 64 (up to 0.7 ms in 100 calls seen at load 3).
set -euo pipefail
program=$1
ranks=$2
measured=$(COMMX_SIMGRID_COMPUTE=measured COMMX_SIMGRID_RANKS=$ranks timeout 120 "$program" compute)
skipped=$(COMMX_SIMGRID_COMPUTE=skip COMMX_SIMGRID_RANKS=$ranks timeout 120 "$program" compute)
echo "measured: $measured"
echo "skipped:  $skipped"
python3 - "$measured" "$skipped" <<'PY'
import sys
measured, skipped = ({k: float(v) for k, v in (w.split("=") for w in line.split())}
                     for line in sys.argv[1:])
failures = []
if measured["busy_charged_s"] < 0.002 or measured["busy_s"] < 0.002:
    failures.append(f"2 ms of CPU time: {measured['busy_charged_s'] * 1e3:.3f} ms charged, "
                    f"the barrier {measured['busy_s'] * 1e3:.3f} ms")
if skipped["busy_s"] >= 0.001 or skipped["busy_charged_s"] != 0:
    failures.append(f"skipped compute still took {skipped['busy_s'] * 1e3:.3f} simulated ms")
if measured["mean_charged_s"] > 200e-6:
    failures.append(f"100 allreduces charged a rank {measured['mean_charged_s'] * 1e6:.1f} us "
                    "on average")
for f in failures:
    print("simgrid_compute:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
