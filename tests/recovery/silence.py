#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Silent ranks, declared lost: a stall and a partition on a network stack.

    silence.py --commxrun COMMXRUN -- STACK=PROGRAM...

Runs recovery_job in `silence:SECONDS` mode at 5 ranks, each on its own node (so shrink's
majority rule applies), with COMMX_SUSPECT_AFTER=1 and two fault plans:

- stall: rank 4 stops for 4 s (faulty's stall, as if SIGSTOPped). The others declare it lost
  and go on as [0, 1, 2, 3] to the end; rank 4, resumed, finds itself refused by everyone, and
  its own shrink ends with errc::no_majority ("refused").
- partition: from 0.5 s ranks 0-2 and 3-4 cannot reach each other, for good. Ranks 0-2 go on
  as [0, 1, 2]; ranks 3 and 4 end "refused": two working halves never form.

On shm (STACK `shm`) the five ranks share one node and only the stall is run (a node does not
split in two): the four mark rank 4 failed in the segment, and rank 4, resumed, finds its own
slot marked and ends "refused" (errc::excluded), not going on by itself.

A run passes when it ends by itself, every rank of the majority printed the same members
after each shrink and the expected last ones, then "finished", and every rank of the minority
printed "refused". Prints one line per run and "silence: runs R, wrong 0".
"""

import sys

from recovery_runs import ROUND, argument_parser, outcomes, ranks_in, run_job

TIMEOUT = 120

# plan, ranks that go on with these members, ranks refused
CASES = {
    "stall": ("stall@4:at=1s:for=4s", (0, 1, 2, 3), (4,)),
    "partition": ("partition=0,0,0,1,1:at=500ms", (0, 1, 2), (3, 4)),
}


def judge(out: str, majority: tuple[int, ...], refused: tuple[int, ...]) -> str | None:
    said = outcomes(out)
    for r in refused:
        lines = said.get(r, [])
        if not lines or not lines[-1].startswith("refused"):
            return f"rank {r} was not refused: {lines}"
    rounds: dict[int, set[tuple[int, ...]]] = {}
    for r in majority:
        lines = said.get(r, [])
        if not lines or lines[-1] != "finished":
            return f"rank {r} did not finish: {lines}"
        last = None
        for line in lines:
            if m := ROUND.match(line):
                last = ranks_in(m.group(2))
                rounds.setdefault(int(m.group(1)), set()).add(last)
        if last != majority:
            return f"rank {r} went on as {last}, not {majority}"
    for k, seen in rounds.items():
        if len(seen) != 1:
            return f"round {k}: the majority's members differ: {seen}"
    return None


def main() -> int:
    p = argument_parser(__doc__)
    p.add_argument("--seconds", type=float, default=8.0,
                   help="how long the majority runs (past the stall's end)")
    args = p.parse_args()
    runs = wrong = 0
    for stack, program in (a.split("=", 1) for a in args.stacks):
        one_node = stack == "shm"
        for case, (plan, majority, refused) in CASES.items():
            if one_node and case != "stall":
                continue
            out = run_job(stack, program, 5, f"silence:{args.seconds}", commxrun=args.commxrun,
                          timeout=TIMEOUT, launch_args=[] if one_node else ["--nodes", "5"],
                          env={"COMMX_TIMEOUT": "20", "COMMX_SUSPECT_AFTER": "1",
                               "COMMX_FAULTS": plan})
            problem = (judge(out, majority, refused) if out is not None else
                       "no end within the time limit")
            runs += 1
            wrong += problem is not None
            print(f"{stack} {case}: " + (f"WRONG: {problem}\n{out}" if problem else
                                         f"{list(majority)} went on, {list(refused)} refused"),
                  flush=True)
    print(f"silence: runs {runs}, wrong {wrong}")
    return 0 if runs and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
