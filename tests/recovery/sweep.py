#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Kills rank R at its K-th send, for every R and every K it makes, and checks recovery.

    sweep.py --commxrun COMMXRUN --ranks 3 4 5 [--only R:K,R:K... | --pairs] [--launch-args ARGS]
             -- STACK=PROGRAM...

For each stack and rank count, runs recovery_job (agree twice, then the shrink loop) under
COMMX_FAULTS=kill@R:after=K, K from 0 until the rank finishes before its plan fires; with
--pairs, two ranks killed one or five sends apart (both in one agreement or one shrink). A schedule
passes when the run ends by itself, every survivor printed the same three lines (two
agreements and the shrunk communicator), every rank is in the first agreement's value or its
lost set, a rank agreed lost in the first is lost in the second, and the shrunk communicator
holds exactly the survivors (and the killed rank, when it died after the last agreement).
Prints one line per stack and a summary: "schedules S, hangs 0, disagreements 0, wrong 0" is
a pass (exit 0).
"""

import re
import sys

from recovery_runs import argument_parser, outcomes, ranks_in, run_job

SANITIZER = re.compile(r"(Address|Thread|Memory|UndefinedBehavior)Sanitizer|runtime error:")
TIMEOUT = 60


def judge(lines, n, killed):
    """What is wrong with one run, or None; and the ranks of `killed` (the plan's) that died."""
    finished = {r for r, ls in lines.items() if any(l.startswith("shrunk") for l in ls)}
    fired = set(killed) - finished
    survivors = set(range(n)) - fired
    if finished != survivors:
        return f"finished {sorted(finished)}, survivors {sorted(survivors)}", fired, "disagree"
    views = {tuple(l for l in lines[r] if not l.startswith("killed")) for r in survivors}
    if len(views) != 1:
        return f"survivors differ: {views}", fired, "disagree"
    agreed1, agreed2, shrunk = next(iter(views))
    m = re.match(r"agreed 1 value=(0x[0-9a-f]+) lost=\[(.*)\]", agreed1)
    value = int(m.group(1), 16)
    lost1 = set(ranks_in(m.group(2)))
    for r in range(n):  # rank r sets bit r % 64 (shared beyond 64 ranks)
        if not (value >> (r % 64)) & 1 and r not in lost1:
            return f"rank {r} neither contributed nor is lost: {agreed1}", fired, "wrong"
    if lost1 - set(killed):
        return f"a live rank agreed lost: {agreed1}", fired, "wrong"
    m = re.match(r"agreed 2 value=(-?\d+) lost=\[(.*)\]", agreed2)
    lost2 = set(ranks_in(m.group(2)))
    if any(k in lost1 and k not in lost2 for k in fired):
        return f"a rank lost in agreement 1 is back in 2: {agreed2}", fired, "wrong"
    m = re.match(r"shrunk size=(\d+) members=\[(.*)\] sum=(\d+)", shrunk)
    members = list(ranks_in(m.group(2)))
    # A rank killed after it took part in the last agreement is still a member: it died after
    # the communicator was agreed, as any rank may.
    if not survivors <= set(members) <= survivors | fired or members != sorted(members) or \
            int(m.group(3)) != sum(r + 1 for r in members):
        return f"shrunk to {shrunk}, survivors {sorted(survivors)}", fired, "wrong"
    return None, fired, None


def main():
    parser = argument_parser(__doc__)
    parser.add_argument("--ranks", type=int, nargs="+", required=True)
    parser.add_argument("--only", default="",
                        help="R:K,R:K...: these kills instead of the whole sweep")
    parser.add_argument("--pairs", action="store_true",
                        help="two ranks killed a few sends apart, instead of one")
    parser.add_argument("--launch-args", default="",
                        help="more arguments for commxrun, e.g. '--nodes 4 --sites 2'")
    args = parser.parse_args()
    total = {"schedules": 0, "hangs": 0, "disagreements": 0, "wrong": 0}
    both = 0  # --pairs: schedules in which both kills fired
    for stack, program in (a.split("=", 1) for a in args.stacks):
        tally = dict.fromkeys(total, 0)
        for n in args.ranks:
            only = [pair for pair in args.only.split(",") if pair]
            if only:
                schedules = [[tuple(int(x) for x in pair.split(":"))] for pair in only]
            elif args.pairs:
                # Two ranks killed close together (1, 3 or 6 sends apart), so that both die in
                # one agreement or one shrink: the coordinator with the last rank, and two
                # others, at every second send.
                schedules = [[(a, k), (b, k + d)] for a, b in ((0, n - 1), (1, 2))
                             for k in range(0, 120, 2) for d in (1, 3, 6)]
            else:
                schedules = [[(killed, k)] for killed in range(n) for k in range(400)]
            stop = set()  # kills that fired for none: later counts do not either
            for kills in schedules:
                ranks = tuple(r for r, _ in kills)
                if ranks in stop:
                    continue
                plan = ";".join(f"kill@{r}:after={k}" for r, k in kills)
                out = run_job(stack, program, n, "agree", commxrun=args.commxrun,
                              timeout=TIMEOUT, env={"COMMX_FAULTS": plan, "COMMX_TIMEOUT": "20"},
                              launch_args=args.launch_args.split())
                tally["schedules"] += 1
                if out is None:
                    tally["hangs"] += 1
                    print(f"{stack} n={n} {plan}: HANG", flush=True)
                    continue
                problem, fired, kind = judge(outcomes(out), n, ranks)
                if SANITIZER.search(out):  # a sanitized build's report, whatever the outcome
                    problem, kind = problem or "a sanitizer reported", "wrong"
                if problem:
                    tally["disagreements" if kind == "disagree" else "wrong"] += 1
                    print(f"{stack} n={n} {plan}: {problem}\n{out}", flush=True)
                if not fired:
                    stop.add(ranks)
                both += len(fired) == 2
        print(f"{stack}: " + ", ".join(f"{k} {v}" for k, v in tally.items()), flush=True)
        for key in total:
            total[key] += tally[key]
    if args.pairs:
        # A pair sweep in which the second kill never fired tested one failure, not two.
        print(f"both ranks killed in {both} schedules")
    print("recovery sweep: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    clean = total["schedules"] and not any(total[k] for k in ("hangs", "disagreements", "wrong"))
    return 0 if clean and (both or not args.pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
