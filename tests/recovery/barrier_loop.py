#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ULFM's barrier loop: ranks kill themselves, the others revoke and shrink, until one is left.

    barrier_loop.py --commxrun COMMXRUN --ranks 5 9 --seeds 1 2 3 -- STACK=PROGRAM...

Runs recovery_job in `suicides:SEED` mode (one rank dies each round, two every third round
while four or more remain). A run passes when it ends by itself, the ranks alive after each
round printed the same members for it, each round's members are the last round's without one
or two, and exactly one rank, the last member, printed "alone". Prints one line per run and
"barrier loop: runs R, wrong 0".
"""

import sys

from recovery_runs import ROUND, argument_parser, outcomes, ranks_in, run_job

TIMEOUT = 120


def judge(out: str, n: int) -> str | None:
    said = outcomes(out)
    alone = [r for r, lines in said.items() if lines and lines[-1] == "alone"]
    if len(alone) != 1:
        return f"ranks saying alone: {alone}"
    rounds: dict[int, set[tuple[int, ...]]] = {}
    for r, lines in said.items():
        for line in lines:
            if line.startswith("error") or line.startswith("WRONG"):
                return f"rank {r}: {line}"
            if m := ROUND.match(line):
                members = ranks_in(m.group(2))
                if r not in members:
                    return f"rank {r} printed members {members} without itself"
                rounds.setdefault(int(m.group(1)), set()).add(members)
    before = tuple(range(n))
    for k in sorted(rounds):
        if len(rounds[k]) != 1:
            return f"round {k}: survivors differ: {rounds[k]}"
        members = next(iter(rounds[k]))
        if not set(members) < set(before) or len(before) - len(members) > 2:
            return f"round {k}: {before} became {members}"
        before = members
    if before != (alone[0],):
        return f"the last members {before}, alone: {alone}"
    return None


def main() -> int:
    p = argument_parser(__doc__)
    p.add_argument("--ranks", type=int, nargs="+", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    args = p.parse_args()
    runs = wrong = 0
    for stack, program in (a.split("=", 1) for a in args.stacks):
        for n in args.ranks:
            for seed in args.seeds:
                out = run_job(stack, program, n, f"suicides:{seed}", commxrun=args.commxrun,
                              timeout=TIMEOUT, env={"COMMX_TIMEOUT": "20"})
                problem = judge(out, n) if out is not None else "no end within the time limit"
                runs += 1
                wrong += problem is not None
                print(f"{stack} n={n} seed={seed}: " + (f"WRONG: {problem}\n{out}" if problem
                                                        else "down to one rank"), flush=True)
    print(f"barrier loop: runs {runs}, wrong {wrong}")
    return 0 if runs and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
