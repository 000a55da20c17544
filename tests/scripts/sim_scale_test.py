#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sim_scale_test.py BUILD_DIR: bench/sim_scale.py end to end at 16 simulated ranks, commx's
tuned (bench_sim_collectives_simgrid) beside SMPI's Open MPI selection (bench_smpi_collectives
under smpirun), allreduce and bcast of 8 B and 1 KiB: every cell ran and took simulated time,
tuned says which algorithm it chose, the two sides are within a factor of 3 of each other on
one platform (a program that put its ranks on other hosts than the other's would not be), and
the report and the README's summary table are written."""
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    build = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        subprocess.run([sys.executable, str(ROOT / "bench/sim_scale.py"), "--build-dir",
                        str(build), "--ranks", "16", "--sides", "tuned", "ompi", "--collectives",
                        "allreduce", "bcast", "--sizes", "8", "1024", "--calls", "2",
                        "--timeout", "120", "--results", str(results), "--summary", "16"],
                       check=True, capture_output=True, text=True, timeout=300)
        cells = [json.loads(line) for line in (results / "cells.jsonl").read_text().splitlines()]
        failures = []
        times = {}
        for side in ("tuned", "ompi"):
            for collective in ("allreduce", "bcast"):
                for size in (8, 1024):
                    found = [c for c in cells if (c["side"], c["collective"], c["bytes"]) ==
                             (side, collective, size)]
                    if len(found) != 1 or not found[0].get("us", 0) > 0:
                        failures.append(f"{side} {collective} {size} B: {found}")
                        continue
                    times[(side, collective, size)] = found[0]["us"]
                    if side == "tuned" and found[0].get("algorithm") in (None, "", "-"):
                        failures.append(f"tuned {collective} {size} B names no algorithm")
        for (side, collective, size), us in times.items():
            other = times.get(("ompi" if side == "tuned" else "tuned", collective, size))
            if other and not 1 / 3 <= us / other <= 3:
                failures.append(f"{collective} {size} B: {side} {us} us against {other}")
        rows = list(csv.reader((results / "summary16.csv").open()))
        if len(rows) < 5:  # a header and a row per collective and size
            failures.append(f"summary16.csv has {len(rows)} rows")
        if "### allreduce" not in (results / "report.md").read_text():
            failures.append("report.md has no allreduce table")
    for f in failures:
        print("sim_scale_test:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
