#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side PMB/IMB tables from Google Benchmark JSON files (scripts/pmb_sweep.py).

    python3 scripts/pmb_report.py results/bench/round*/*.json

One table per commx stack. For every benchmark, size and rank count: each commx policy's time
per call (the slowest rank's; the median over the files of each file's median), the MPI
libraries' (openmpi: its default transports, vader on one node; openmpi-tcp: its TCP BTL only),
the best commx policy over the MPI run that matches the stack's layout, and tuned over the best
commx policy. Times in microseconds.
"""
from __future__ import annotations

import collections
import json
import statistics
import sys

POLICIES = ["flat", "binomial", "ring", "hierarchical", "tuned", "native"]
SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# The MPI run each commx stack is held against: the same layout of one machine.
MPI_PEER = {"shm": "openmpi", "inproc": "openmpi", "mpi": "openmpi",
            "tcp": "openmpi-tcp", "wan": "openmpi-tcp"}


def medians(paths) -> dict[tuple[str, str, int, int], float]:
    """(bench, label, np, bytes) -> microseconds: the median over the files of each file's
    median. Labels are "commx-<stack>-<policy>", "commx-<stack>" (point-to-point) or an MPI
    library's name."""
    seen = collections.defaultdict(list)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for run in data.get("benchmarks", []):
            if run.get("aggregate_name") != "median":
                continue
            bench, label, np_, size = run["run_name"].split("/")[:4]
            us = run["real_time"] * SCALE[run.get("time_unit", "ns")]
            seen[(bench, label, int(np_[2:]), int(size))].append(us)
    return {key: statistics.median(values) for key, values in seen.items()}


def split_label(label: str) -> tuple[str, str | None] | None:
    """("shm", "ring") for commx-shm-ring, ("shm", None) for commx-shm, None for an MPI's."""
    if not label.startswith("commx-"):
        return None
    stack, _, policy = label[len("commx-"):].rpartition("-")
    return (stack, policy) if stack and policy in POLICIES else (label[len("commx-"):], None)


def stack_table(stack: str, times: dict) -> list[str]:
    mpi_names = sorted({label for (_, label, _, _) in times if split_label(label) is None})
    peer = MPI_PEER.get(stack, "openmpi")
    rows = collections.defaultdict(dict)  # (bench, np, bytes) -> {column: us}
    for (bench, label, np_, size), us in times.items():
        parsed = split_label(label)
        if parsed is None:
            rows[(bench, np_, size)][label] = us
        elif parsed[0] == stack:
            rows[(bench, np_, size)][parsed[1] or "p2p"] = us
    policies = [p for p in POLICIES if any(p in r for r in rows.values())]
    header = ["bench", "np", "bytes"] + policies + ["p2p"] + mpi_names + \
        [f"best/{peer}", "tuned/best"]
    out = [f"=== commx {stack} (against {peer})", " ".join(f"{h:>13}" for h in header)]
    for (bench, np_, size), cols in sorted(rows.items()):
        if not any(c in cols for c in policies + ["p2p"]):
            continue
        row = [bench, str(np_), str(size)]
        row += [f"{cols[c]:.2f}" if c in cols else "-" for c in policies + ["p2p"] + mpi_names]
        candidates = [cols[p] for p in policies if p != "tuned" and p in cols] or \
            ([cols["p2p"]] if "p2p" in cols else [])
        best = min(candidates) if candidates else None
        row.append(f"{best / cols[peer]:.2f}" if best and cols.get(peer) else "-")
        row.append(f"{cols['tuned'] / best:.2f}" if best and "tuned" in cols else "-")
        out.append(" ".join(f"{c:>13}" for c in row))
    return out


def main(paths) -> None:
    times = medians(paths)
    stacks = sorted({parsed[0] for (_, label, _, _) in times
                     if (parsed := split_label(label)) is not None})
    for stack in stacks:
        print("\n".join(stack_table(stack, times)))
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
