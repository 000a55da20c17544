#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side PMB/IMB tables from Google Benchmark JSON files (scripts/pmb_sweep.py).

    python3 scripts/pmb_report.py results/bench/round*/*.json

One table per commx stack. For every benchmark, size and rank count: each commx policy's time
per call (the slowest rank's; the median over the files of each file's median), the MPI
libraries' (openmpi: its default transports, vader on one node; openmpi-tcp: its TCP BTL only),
the best commx policy over the MPI run that matches the stack's layout, and tuned over the best
of the policies it chooses from (all but native). Times in microseconds.

The two ratios are medians over the rounds (a file's directory, round<k>/) of each round's
ratio, the best policy being the one with the lowest median: runs of one round were taken
minutes apart at most, a point's policies seconds apart, and a VM that changes speed between
rounds would otherwise set one policy's slow rounds against another's fast ones. Under each
table, how many points from 8 B to 4 MiB (and the barrier) meet issue 20's goals: the best
policy at or below the MPI, tuned within 10% of the best. Where pmb_sweep.py timed a cache line
before and after each round (round<k>/mode.txt), the rounds are listed by the VM's mode (fast:
under 100 ns at both ends; slow: 100 ns or more at both; mixed), and the goals are counted again
over the runs that met the fast mode alone and the slow mode alone (each run's own mode where
pmb_sweep.py timed one around it, <stack>-np<k>.mode.txt; else its round's). A point whose
ratio is over a goal's bound while the 95% interval of that median (over its rounds,
median_interval) still reaches the bound is counted apart, "within the noise": measured above,
not shown to be.
"""
from __future__ import annotations

import collections
import json
import math
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launching import line_mode  # noqa: E402  (one reading of a cache line's crossing)

POLICIES = ["flat", "binomial", "ring", "hierarchical", "tuned", "native"]
# What coll::tuned chooses from. Never native: MPI's own collectives block as MPI does, past
# the call's deadline and a lost peer, so tuned is held against the best of these.
TUNABLE = ["flat", "binomial", "ring", "hierarchical"]
OPS = {"Allreduce": "allreduce", "Reduce": "reduce", "Reduce_scatter": "reduce_scatter",
       "Allgather": "allgather", "Allgatherv": "allgatherv", "Alltoall": "alltoall",
       "Bcast": "bcast", "Barrier": "barrier"}
# ring and hierarchical inherit binomial's algorithm for the collectives they do not redefine.
# Timing the same code twice must not count as two policies: the faster copy by noise would
# make "the best policy" a minimum of two samples of one, lower than any policy's own median.
OWN = {"ring": {"allreduce", "allgather", "allgatherv", "reduce_scatter"},
       "hierarchical": {"barrier", "bcast", "reduce", "allreduce", "allgather", "reduce_scatter"}}
# ring's bcast is its own (a scatter, then an allgather) from 64 KiB at 4 ranks or more
# (coll/ring.hpp, detail::scatter_allgather_bcast_bytes); binomial's tree below. Its allreduce
# is binomial's with fewer elements than ranks: PMB's are doubles (bench/pmb_pattern.hpp).
RING_BCAST_BYTES, RING_BCAST_RANKS = 64 << 10, 4
PMB_ELEMENT_BYTES = 8
SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# The MPI run each commx stack is held against: the same layout of one machine.
MPI_PEER = {"shm": "openmpi", "inproc": "openmpi", "mpi": "openmpi",
            "tcp": "openmpi-tcp", "wan": "openmpi-tcp", "shm_tcp": "openmpi-tcp",
            "shm_tcp_wan": "openmpi-tcp", "mpi_wan": "openmpi-tcp",
            # ucx against MPICH's ch4:ucx: one UCX under both, with the same UCX_TLS.
            "ucx": "mpich", "shm_ucx": "openmpi-tcp"}


def file_mode(path: str) -> str | None:
    """"fast", "slow" or "mixed" (launching.line_mode) from a file of a cache line's crossing
    before and after (pmb_sweep.py's mode.txt), None where there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            before, after = (float(v) for v in f.read().split()[1:3])
    except (OSError, ValueError):
        return None
    return line_mode(before, after)


def round_modes(paths) -> dict[str, str]:
    """Round directory -> "fast", "slow" or "mixed", from its mode.txt (pmb_sweep.py)."""
    modes = {}
    for folder in {os.path.dirname(os.path.abspath(path)) for path in paths}:
        mode = file_mode(os.path.join(folder, "mode.txt"))
        if mode is not None:
            modes[folder] = mode
    return modes


def run_mode(round_: str, stack: str, ranks: int) -> str | None:
    """The VM's mode during one run of a round (pmb_sweep.py's <stack>-np<ranks>.mode.txt:
    the mode changes within a round as often as not), else during the whole round."""
    folder = round_ if os.path.isdir(round_) else os.path.dirname(round_)
    return file_mode(os.path.join(folder, f"{stack}-np{ranks}.mode.txt")) or \
        file_mode(os.path.join(folder, "mode.txt"))


def only_mode(rounds: dict, mode: str) -> dict:
    """`rounds` (by_round's) keeping, for each point, the rounds whose run of it met `mode`
    (run_mode: the run's own mode where pmb_sweep.py recorded it, else its round's)."""
    kept = {}
    for point, per_round in rounds.items():
        label, ranks = point[1], point[2]
        parsed = split_label(label)
        stack = parsed[0] if parsed is not None else label
        mine = {r: us for r, us in per_round.items() if run_mode(r, stack, ranks) == mode}
        if mine:
            kept[point] = mine
    return kept


def by_round(paths) -> dict[tuple[str, str, int, int], dict[str, float]]:
    """(bench, label, np, bytes) -> {round: microseconds}, each file's median, the round being
    the file's directory (pmb_sweep.py's round<k>/; a file that repeats a point of another in
    its directory is a round of its own). Labels are "commx-<stack>-<policy>",
    "commx-<stack>" (point-to-point) or an MPI library's name."""
    seen = collections.defaultdict(dict)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        round_ = os.path.dirname(os.path.abspath(path))
        for run in data.get("benchmarks", []):
            if run.get("aggregate_name") != "median":
                continue
            bench, label, np_, size = run["run_name"].split("/")[:4]
            us = run["real_time"] * SCALE[run.get("time_unit", "ns")]
            point = seen[(bench, label, int(np_[2:]), int(size))]
            point[round_ if round_ not in point else os.path.abspath(path)] = us
    return seen


def round_ratios(over: dict[str, float] | None, under: dict[str, float] | None) -> list[float]:
    """over / under in each round both have."""
    if not over or not under:
        return []
    return [over[r] / under[r] for r in over if r in under and under[r] > 0]


def round_ratio(over: dict[str, float] | None, under: dict[str, float] | None) -> float | None:
    """The median over the rounds both have of over / under in that round."""
    ratios = round_ratios(over, under)
    return statistics.median(ratios) if ratios else None


def median_interval(values, confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median of `values`, the sign test's: the order
    statistics x(j) and x(n+1-j) with the largest j whose coverage, 1 - 2 P(B < j) for B
    binomial(n, 1/2), is at least `confidence`. None for fewer than 6 values (no pair of them
    covers 95%). It assumes nothing of the shape, and rounds' ratios on a VM that changes speed
    have none to assume."""
    ordered = sorted(values)
    n = len(ordered)
    below, interval = 0.0, None  # below: P(B < j)
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1) / 2 ** n
        if 1 - 2 * below < confidence:
            break
        interval = (ordered[j - 1], ordered[n - j])
    return interval


def round_interval(over: dict[str, float] | None,
                   under: dict[str, float] | None) -> tuple[float, float] | None:
    """median_interval of the rounds' ratios that round_ratio takes the median of."""
    return median_interval(round_ratios(over, under))


def goal_state(ratio: float, interval: tuple[float, float] | None, bound: float) -> str:
    """"met" at or below `bound`; "noise" above it while the interval reaches it; else "missed"."""
    if ratio <= bound:
        return "met"
    return "noise" if interval is not None and interval[0] <= bound else "missed"


def counted(bench: str, size: int) -> bool:
    """The points issue 20's goals count: 8 B to 4 MiB, and the barrier."""
    return bench == "Barrier" or 8 <= size <= 4 << 20


def inherited(policy: str, bench: str, ranks: int, size: int) -> bool:
    """Whether `policy` runs binomial's code for PMB's `bench` at `ranks` and `size` bytes."""
    if policy == "ring" and bench == "Bcast":
        return size < RING_BCAST_BYTES or ranks < RING_BCAST_RANKS
    if policy == "ring" and bench == "Allreduce":
        return size // PMB_ELEMENT_BYTES < ranks
    return policy in OWN and OPS.get(bench) not in OWN[policy]


def split_label(label: str) -> tuple[str, str | None] | None:
    """("shm", "ring") for commx-shm-ring, ("shm", None) for commx-shm, None for an MPI's."""
    if not label.startswith("commx-"):
        return None
    stack, _, policy = label[len("commx-"):].rpartition("-")
    return (stack, policy) if stack and policy in POLICIES else (label[len("commx-"):], None)


def stack_points(stack: str, rounds: dict) -> tuple[list[str], list[dict]]:
    """The policies `stack` was measured with, and per point (bench, np, bytes; sorted) the
    times of every column by round and their medians, the best policy ("p2p" where only that ran), the best of the
    policies tuned chooses from, and the ratios best/peer and tuned/best-tunable."""
    peer = MPI_PEER.get(stack, "openmpi")
    rows = collections.defaultdict(dict)  # (bench, np, bytes) -> {column: {round: us}}
    for (bench, label, np_, size), per_round in rounds.items():
        parsed = split_label(label)
        if parsed is None:
            rows[(bench, np_, size)][label] = per_round
        elif parsed[0] == stack:
            rows[(bench, np_, size)][parsed[1] or "p2p"] = per_round
    policies = [p for p in POLICIES if any(p in r for r in rows.values())]
    points = []
    for (bench, np_, size), per_round in sorted(rows.items()):
        if not any(c in per_round for c in policies + ["p2p"]):
            continue
        cols = {c: statistics.median(v.values()) for c, v in per_round.items()}
        candidates = [p for p in policies
                      if p != "tuned" and p in cols and not inherited(p, bench, np_, size)] or \
            (["p2p"] if "p2p" in cols else [])
        best = min(candidates, key=cols.get) if candidates else None
        tunable = [p for p in TUNABLE if p in cols and not inherited(p, bench, np_, size)]
        best_tunable = min(tunable, key=cols.get) if tunable else None
        points.append({
            "bench": bench, "np": np_, "bytes": size, "medians": cols, "rounds": per_round,
            "peer": peer,
            "best": best, "best_tunable": best_tunable,
            "best_over_peer": round_ratio(per_round.get(best), per_round.get(peer)),
            "tuned_over_best": round_ratio(per_round.get("tuned"), per_round.get(best_tunable)),
            "best_over_peer_interval": round_interval(per_round.get(best), per_round.get(peer)),
            "tuned_over_best_interval": round_interval(per_round.get("tuned"),
                                                       per_round.get(best_tunable)),
        })
    return policies, points


def stack_table(stack: str, rounds: dict) -> list[str]:
    mpi_names = sorted({label for (_, label, _, _) in rounds if split_label(label) is None})
    policies, points = stack_points(stack, rounds)
    peer = MPI_PEER.get(stack, "openmpi")
    header = ["bench", "np", "bytes"] + policies + ["p2p"] + mpi_names + \
        [f"best/{peer}", "tuned/best"]
    out = [f"=== commx {stack} (against {peer})", " ".join(f"{h:>13}" for h in header)]
    # np -> counts: "points", and (goal, goal_state) for the goals "best" and "tuned"
    goals = collections.defaultdict(collections.Counter)
    for point in points:
        cols = point["medians"]
        row = [point["bench"], str(point["np"]), str(point["bytes"])]
        row += [f"{cols[c]:.2f}" if c in cols else "-" for c in policies + ["p2p"] + mpi_names]
        best_over_peer, tuned_over_best = point["best_over_peer"], point["tuned_over_best"]
        row.append(f"{best_over_peer:.2f}" if best_over_peer else "-")
        row.append(f"{tuned_over_best:.2f}" if tuned_over_best else "-")
        out.append(" ".join(f"{c:>13}" for c in row))
        if best_over_peer and tuned_over_best and counted(point["bench"], point["bytes"]):
            goal = goals[point["np"]]
            goal["points"] += 1
            goal["best", goal_state(best_over_peer, point["best_over_peer_interval"], 1.0)] += 1
            goal["tuned", goal_state(tuned_over_best, point["tuned_over_best_interval"], 1.1)] += 1
    for np_, goal in sorted(goals.items()):
        out.append(f"np{np_}: best at or below {peer} at {goal['best', 'met']} of "
                   f"{goal['points']} points{more_within_noise(goal['best', 'noise'])}, tuned "
                   f"within 10% of the best at {goal['tuned', 'met']} of {goal['points']}"
                   f"{more_within_noise(goal['tuned', 'noise'])}")
    return out


def more_within_noise(count: int) -> str:
    return f" ({count} more within the noise)" if count else ""


def main(paths) -> None:
    rounds = by_round(paths)
    stacks = sorted({parsed[0] for (_, label, _, _) in rounds
                     if (parsed := split_label(label)) is not None})
    modes = round_modes(paths)
    if modes:
        print("rounds by the VM's mode (a cache line before and after): " +
              ", ".join(f"{os.path.basename(d)} {m}" for d, m in sorted(modes.items())))
    for stack in stacks:
        print("\n".join(stack_table(stack, rounds)))
        for mode in ("fast", "slow"):
            in_mode = only_mode(rounds, mode)
            if not in_mode or in_mode == rounds:  # no run, or every run, met it
                continue
            for line in stack_table(stack, in_mode):
                if line.startswith("np"):
                    print(f"  {mode} runs only: {line}")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
