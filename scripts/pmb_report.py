#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side PMB/IMB table from Google Benchmark JSON files.

    python3 scripts/pmb_report.py results/bench/*.json

For every benchmark, size and rank count: each commx policy's time per call (median of the
repetitions, slowest rank), the MPI library's, the best commx policy over MPI, and tuned over
the best commx policy. Times in microseconds.
"""
import collections
import json
import sys

POLICIES = ["flat", "binomial", "ring", "hierarchical", "tuned"]


def load(paths):
    """(bench, np, bytes) -> {stack: microseconds}"""
    table = collections.defaultdict(dict)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for run in data.get("benchmarks", []):
            if run.get("aggregate_name") != "median":
                continue
            bench, stack, np_, size = run["run_name"].split("/")[:4]
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[run.get("time_unit", "ns")]
            table[(bench, int(np_[2:]), int(size))][stack] = run["real_time"] * scale
    return table


def policy_times(stacks):
    return {s.rsplit("-", 1)[1]: t for s, t in stacks.items() if s.startswith("commx-inproc-")}


def main(paths):
    table = load(paths)
    mpi_names = sorted({s for v in table.values() for s in v if not s.startswith("commx")})
    header = ["bench", "np", "bytes"] + POLICIES + ["p2p"] + mpi_names + ["best/mpi", "tuned/best"]
    print(" ".join(f"{h:>14}" for h in header))
    for (bench, np_, size), stacks in sorted(table.items()):
        policies = policy_times(stacks)
        row = [bench, str(np_), str(size)]
        row += [f"{policies[p]:.2f}" if p in policies else "-" for p in POLICIES]
        row.append(f"{stacks['commx-inproc']:.2f}" if "commx-inproc" in stacks else "-")
        row += [f"{stacks[m]:.2f}" if m in stacks else "-" for m in mpi_names]
        candidates = {p: t for p, t in policies.items() if p != "tuned"} or (
            {"p2p": stacks["commx-inproc"]} if "commx-inproc" in stacks else {})
        best = min(candidates.values()) if candidates else None
        mpi = next((stacks[m] for m in mpi_names if m in stacks), None)
        row.append(f"{best / mpi:.2f}" if best and mpi else "-")
        row.append(f"{policies['tuned'] / best:.2f}" if best and "tuned" in policies else "-")
        print(" ".join(f"{c:>14}" for c in row))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
