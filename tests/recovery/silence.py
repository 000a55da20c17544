#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Silent ranks, declared lost: a stall and a partition, across nodes and on one node.

    silence.py --commxrun COMMXRUN -- STACK=PROGRAM...

Runs recovery_job in `silence:SECONDS` mode at 5 ranks (one case below: another mode, 4 ranks)
with COMMX_SUSPECT_AFTER=1 and these fault plans, --jobs runs at once (most of a run is
waiting: for the stall to end, for the time to be up, with a pause between rounds):

- stall, each rank on its own node: rank 4 stops for 4 s (faulty's stall, as if SIGSTOPped).
  The others declare it lost and go on as [0, 1, 2, 3] to the end; rank 4, resumed, finds
  itself refused by everyone, and its own shrink ends with errc::no_majority ("refused").
- partition, each rank on its own node: from 0.5 s ranks 0-2 and 3-4 cannot reach each other,
  for good. Ranks 0-2 go on as [0, 1, 2]; ranks 3 and 4 end "refused": two working halves
  never form.
- stall, all five on one node: the same outcome. On tcp rank 4, resumed, reads the decision
  that named it lost, still waiting on a connection the others closed, and ends with
  errc::excluded; without it, it would find every connection closed, as a rank whose peers
  all died does, and shrink's majority rule (which holds on one host too on a network stack:
  transport::splits_within_node) ends it with errc::no_majority rather than as a job of one.
  On shm the others mark it failed in the segment, on inproc (threads) in the hub; resumed, it
  finds itself marked and ends with errc::excluded.
- partition, all five on one node (tcp): ranks 0-1 and 2-4 from 0.5 s. Ranks 2-4 go on as
  [2, 3, 4]; ranks 0 and 1 end "refused": between ranks of one host tcp's majority rule holds
  (transport::splits_within_node).
- three killed, all five on one node (inproc, shm, shm+tcp): ranks 2, 3 and 4 die at 1 s;
  nothing can partition a node whose ranks share memory (shm+tcp's node is shm's), and ranks 0
  and 1 go on as [0, 1]. Not on tcp: there the two end refused when they find all three lost
  in one agreement, and go on when the deaths reach them one after another and each shrink
  keeps a majority of the communicator before it (5, then 3 or 4, then 2 of 3): which one
  happens depends on the order the deaths are seen, so tcp's case is the partition above.
- half lost between shrink's agreements, 4 ranks on one node (tcp; `half_after_agreeing`
  mode, no suspicion needed): ranks 2 and 3 take part in shrink's first agreement and die at
  their first send in its second (kill@R:after=4: an agreement of 4 ranks over a network sends
  4 messages a rank). Ranks 0 and 1, half of what all four agreed on, end "refused": the shrink
  that follows keeps the majority rule.

The one-node cases run on inproc, tcp, shm and shm+tcp (the stall not on shm+tcp; wan's rule
is tcp's), and STACKs `inproc` and `shm` run only those (a node does not split in two). A run
passes when it ends by itself, every rank of the majority printed the same members after each
shrink and the expected last ones, then "finished", and every rank of the minority printed
"refused". Prints one line per run and "silence: runs R, wrong 0".
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from recovery_runs import ROUND, argument_parser, outcomes, ranks_in, run_job

TIMEOUT = 120

STALL = "stall@4:at=1s:for=4s"
KILL_THREE = "kill@2:at=1s;kill@3:at=1s;kill@4:at=1s"
# Stacks whose ranks on one node are joined by shared memory (not transport::splits_within_node).
MEMORY_JOINED = {"inproc", "shm", "shm_tcp"}


class Case(NamedTuple):
    """One run: its fault plan, the ranks that go on with these members and those refused."""
    name: str
    plan: str
    majority: tuple[int, ...]
    refused: tuple[int, ...]
    one_node: bool
    ranks: int = 5
    mode: str | None = None  # recovery_job's mode; None: silence's


def cases(stack: str):
    """The cases run on `stack`."""
    if stack not in ("inproc", "shm"):
        yield Case("stall", STALL, (0, 1, 2, 3), (4,), False)
        yield Case("partition", "partition=0,0,0,1,1:at=500ms", (0, 1, 2), (3, 4), False)
    if stack in ("inproc", "tcp", "shm"):
        yield Case("stall on one node", STALL, (0, 1, 2, 3), (4,), True)
    if stack == "tcp":
        yield Case("partition on one node", "partition=0,0,1,1,1:at=500ms", (2, 3, 4), (0, 1),
                   True)
        yield Case("half lost between shrink's agreements", "kill@2:after=4;kill@3:after=4", (),
                   (0, 1), True, ranks=4, mode="half_after_agreeing")
    if stack in MEMORY_JOINED:
        yield Case("three killed on one node", KILL_THREE, (0, 1), (), True)


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
    p.add_argument("--jobs", type=int, default=3,
                   help="runs at once: each waits out its stall or partition, its ranks idle "
                        "between rounds")
    args = p.parse_args()

    def one(stack: str, program: str, case: Case):
        out = run_job(stack, program, case.ranks, case.mode or f"silence:{args.seconds}",
                      commxrun=args.commxrun, timeout=TIMEOUT,
                      launch_args=[] if case.one_node else ["--nodes", "5"],
                      env={"COMMX_TIMEOUT": "20", "COMMX_SUSPECT_AFTER": "1",
                           "COMMX_FAULTS": case.plan})
        problem = (judge(out, case.majority, case.refused) if out is not None else
                   "no end within the time limit")
        return problem, (f"{stack} {case.name}: " +
                         (f"WRONG: {problem}\n{out}" if problem else
                          f"{list(case.majority)} went on, {list(case.refused)} refused"))

    runs = [(stack, program, case) for stack, program in (a.split("=", 1) for a in args.stacks)
            for case in cases(stack)]
    wrong = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for problem, line in pool.map(lambda run: one(*run), runs):
            wrong += problem is not None
            print(line, flush=True)
    print(f"silence: runs {len(runs)}, wrong {wrong}")
    return 0 if runs and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
