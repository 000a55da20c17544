#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generates coll::tuned's table for one stack from PMB runs on that stack (pmb_sweep.py).

    python3 scripts/tune_collectives.py --stack shm results/bench/round*/shm-np*.json \\
        > include/commx/coll/tuned_tables/shm.hpp

Reads the runs labelled commx-<stack>-<policy> and rates each policy at each point by the
median over the rounds (pmb_report.by_round) of its time over the round's fastest: a point's
policies run seconds apart, rounds minutes apart, and a VM that changes speed between rounds
would otherwise set one policy's slow rounds against another's fast ones. Where the runs name
the VM's mode (pmb_sweep.py's <stack>-np<k>.mode.txt, else the round's mode.txt: its CPUs on
one die or on two), the median is taken over each mode's rounds apart and the policy rated by
the worse: a choice must hold in both (on a many-core node most pairs of ranks are on
different dies), where pooled rounds let the more frequent mode decide alone. A mode met in
fewer than 3 rounds at a point does not rate alone, and rounds that changed mode midway count
only where no round kept one.

For each collective and measured rank count, the best rated of flat, binomial, ring and
hierarchical at each measured size becomes a rule from that size up (and from just above the
previous measured rank count up), unless the choice in force is within 5% of it; 0-byte calls,
which move nothing, choose nothing. allgatherv, whose sizes differ between ranks, is chosen by
rank count alone: the policy with the least total rating (reduce_scatter chooses by its whole
input, the same size on every rank).

    cp include/commx/coll/tuned_tables/shm.hpp /tmp/shm.hpp
    python3 scripts/tune_collectives.py --stack shm --keep /tmp/shm.hpp RUNS... \\
        > include/commx/coll/tuned_tables/shm.hpp

keeps the old table's rules for rank counts above and below those measured here (a copy: the
shell empties the file it writes into before this reads), so a sweep at 2 and 4 ranks can redo
those counts without the hours a sweep at 32 takes, and one at 8 redoes 5 to 8 alone; and all
its rules for the collectives the runs do not measure, so a sweep of a few collectives
(pmb_sweep.py --filter) redoes their rules alone.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import statistics
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pmb_report import TUNABLE as CANDIDATES  # noqa: E402  (one reading of the runs)
from pmb_report import OPS, by_round, inherited, run_mode, split_label  # noqa: E402
BY_RANKS_ONLY = {"allgatherv"}
HYSTERESIS = 1.05  # keep the current choice while it is within 5% of the fastest
MIN_MODE_ROUNDS = 3  # rounds of one VM mode at a point before that mode rates on its own


def load(paths, stack: str):
    """op -> np -> bytes -> {policy: rating} for the runs on `stack`: the median over the
    rounds of the policy's time over the fastest candidate's in that round (1 for a policy
    that was fastest in most rounds), the worse of the VM's modes where rounds name them."""
    rounds = collections.defaultdict(dict)  # (op, np, bytes) -> {policy: {round: us}}
    for (bench, label, np_, size), per_round in by_round(paths).items():
        parsed = split_label(label)
        if parsed is None or parsed[0] != stack or bench not in OPS:
            continue
        policy = parsed[1]
        if policy not in CANDIDATES or inherited(policy, bench, np_, size):
            continue
        rounds[(OPS[bench], np_, size)][policy] = per_round
    times = collections.defaultdict(lambda: collections.defaultdict(dict))
    for (op, np_, size), policies in rounds.items():
        fastest = collections.defaultdict(lambda: float("inf"))
        for per_round in policies.values():
            for round_, us in per_round.items():
                fastest[round_] = min(fastest[round_], us)
        groups = mode_groups(fastest, {r: run_mode(r, stack, np_) for r in fastest})
        times[op][np_][size] = {
            policy: max(statistics.median(per_round[r] / fastest[r] for r in group
                                          if r in per_round)
                        for group in groups if any(r in per_round for r in group))
            for policy, per_round in policies.items()}
    return times


def mode_groups(rounds, modes: dict[str, str | None]) -> list[list[str]]:
    """`rounds` split by the VM's mode during each, the modes met in MIN_MODE_ROUNDS or more
    (fewer is one spell's noise, not a mode's rating); else the rounds that kept one mode
    together; rounds that changed mode midway, or of no known mode, only where none kept one."""
    groups = collections.defaultdict(list)
    for round_ in rounds:
        groups[modes.get(round_) or "unknown"].append(round_)
    kept = [group for mode, group in groups.items() if mode in ("fast", "slow")]
    rated = [group for group in kept if len(group) >= MIN_MODE_ROUNDS]
    return rated or ([[r for group in kept for r in group]] if kept else list(groups.values()))


def table_rules(path: str) -> list[tuple[str, int, int, str]]:
    """The rules of the generated table at `path`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"tuning_rule\{stats::op::(\w+), (\d+), (\d+), algorithm::(\w+)\}", text)
    return [(op, int(ranks), int(size), use) for op, ranks, size, use in found]


def kept_rules(path: str, above_ranks: int, remade: set[str],
               below: dict[str, int] | None = None) -> list[tuple[str, int, int, str]]:
    """The rules of the generated table at `path` for more than `above_ranks` ranks or, per
    collective, from fewer than `below` (where the runs' smallest count starts: first_buckets),
    and all of its rules for the collectives not in `remade`."""
    below = below or {}
    return [(op, ranks, size, use) for op, ranks, size, use in table_rules(path)
            if ranks > above_ranks or ranks < below.get(op, 1) or op not in remade]


def first_buckets(path: str, times) -> dict[str, int]:
    """Per collective measured in `times`, the least rank count a rule for its smallest
    measured count applies from: the start of the old table's bucket that holds it (a sweep at
    8 ranks alone remakes 5 to 8 and keeps the rules for 2 and 4)."""
    starts = collections.defaultdict(set)
    for op, ranks, _, _ in table_rules(path):
        starts[op].add(ranks)
    return {op: max((r for r in starts[op] if r <= min(per_op)), default=1)
            for op, per_op in times.items()}


def kept_measured_ranks(path: str) -> int:
    """The largest rank count the generated table at `path` was measured at."""
    with open(path, encoding="utf-8") as f:
        found = re.search(r"tuned_measured_ranks_\w+ = (\d+);", f.read())
    return int(found.group(1)) if found else 0


def rules(times, first_ranks: dict[str, int] | None = None):
    """The table's rules from `times`; a collective's first rule applies from its
    `first_ranks` (1 unless given)."""
    out = []
    for op in sorted(times):
        previous_np = (first_ranks or {}).get(op, 1) - 1
        for np_ in sorted(times[op]):
            min_ranks = previous_np + 1
            previous_np = np_
            sizes = times[op][np_]
            if op in BY_RANKS_ONLY:
                totals = collections.Counter()
                for per_policy in sizes.values():
                    for policy, rating in per_policy.items():
                        totals[policy] += rating
                out.append((op, min_ranks, 0, min(totals, key=totals.get)))
                continue
            current = None
            # A call of 0 bytes moves nothing: its winner is the noise of a few nanoseconds, and
            # the hysteresis would keep it at 8 bytes. The smallest size that moves data
            # chooses from 0 up (the barrier has only 0).
            for size in sorted(s for s in sizes if s > 0 or len(sizes) == 1):
                times_here = sizes[size]
                best = min(times_here, key=times_here.get)
                # Switch only for a clear win: near-ties are noise and would make the table flap.
                if current is None or \
                        times_here.get(current, float("inf")) > HYSTERESIS * times_here[best]:
                    if best != current:
                        out.append((op, min_ranks, 0 if current is None else size, best))
                        current = best
    return out


def header(stack: str, table, sources: str, measured_ranks: int = 0, cores: int = 2) -> str:
    """The table as coll/tuned_tables/STACK.hpp; `measured_ranks`, the largest rank count
    measured (default: the largest min_ranks the table names, rounded up to a power of two),
    is where tuned's cost model takes over; `cores`, the measuring machine's, beyond which the
    table holds only on an oversubscribed node (coll/detail/node_load.hpp)."""
    if measured_ranks == 0:
        largest = max((min_ranks for _, min_ranks, _, _ in table), default=1)
        measured_ranks = 1 << max(largest - 1, 0).bit_length() if largest > 1 else 2
    ident = re.sub(r"[^a-z0-9]", "_", stack)
    lines = [
        "// SPDX-License-Identifier: MIT",
        "#pragma once",
        "/// @file",
        f"/// coll::tuned's table for the {stack} stack. Generated: do not edit; see "
        "coll/tuned_table.hpp.",
        "",
        "#include <array>",
        "",
        '#include "commx/coll/detail/tuning_rule.hpp"',
        "",
        "namespace commx::coll::detail {",
        "",
        *textwrap.wrap(f"Generated by scripts/tune_collectives.py on "
                       f"{datetime.date.today().isoformat()} from {sources}.", 97,
                       initial_indent="// ", subsequent_indent="// "),
        f"inline constexpr int tuned_measured_ranks_{ident} = {measured_ranks};",
        f"inline constexpr int tuned_measured_cores_{ident} = {cores};",
        f"inline constexpr std::array tuned_rules_{ident}{{",
    ]
    lines += [f"    tuning_rule{{stats::op::{op}, {min_ranks}, {min_bytes}, algorithm::{use}}},"
              for op, min_ranks, min_bytes, use in table]
    lines += ["};", "", "}  // namespace commx::coll::detail", ""]
    return "\n".join(lines)


def cores(paths) -> int:
    """The cores of the machine the runs were taken on (Google Benchmark's context), the
    fewest if they differ."""
    counts = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            counts.add(int(json.load(f).get("context", {}).get("num_cpus", 0)))
    counts.discard(0)
    if not counts:
        raise SystemExit("tune_collectives: no run says how many cores its machine had")
    return min(counts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stack", required=True, help="inproc, shm, tcp, wan, mpi, ...")
    p.add_argument("--keep", metavar="TABLE",
                   help="a generated table whose rules above the rank counts measured here stay")
    p.add_argument("runs", nargs="+", help="Google Benchmark JSON files")
    args = p.parse_args()
    times = load(args.runs, args.stack)
    first_ranks = first_buckets(args.keep, times) if args.keep else None
    table = rules(times, first_ranks)
    if not table:
        print(f"tune_collectives: no commx-{args.stack}-<policy> runs in the files given",
              file=sys.stderr)
        return 1
    counts = {np_ for per_op in times.values() for np_ in per_op}
    measured = max(counts)
    sources = f"{len(args.runs)} PMB runs on {args.stack}"
    if args.keep:
        table = sorted(table + kept_rules(args.keep, measured, set(times), first_ranks),
                       key=lambda r: (r[0], r[1], r[2]))
        span = f"{measured}" if min(counts) == measured else f"{min(counts)}-{measured}"
        sources += f" (outside {span} ranks, the rules of the table it replaced)"
        if set(times) != set(OPS.values()):
            sources += f"; {', '.join(sorted(times))} only, the rest kept"
        measured = max(measured, kept_measured_ranks(args.keep))
    sys.stdout.write(header(args.stack, table, sources, measured, cores(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
