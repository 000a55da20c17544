#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""md_replicated --survive, with ranks killed by transport::faulty: the end state's bits.

    survive.py --commxrun COMMXRUN [--seed S] [--ranks N] -- STACK=PROGRAM[@LAUNCH ARGS]...

For each stack (PROGRAM an md_replicated_faulty_<stack>; LAUNCH ARGS go to commxrun, e.g.
"--nodes 2"), runs a 500-atom, 60-step --survive run:
  - without faults at N ranks, and at N - 1 (the survivors' count from the start): the
    reference fingerprint, which both must print;
  - rank 0 (the one that reports) killed at a seeded collective send;
  - three ranks killed at seeded collective sends (N >= 5 keeps a majority at each loss).
A killed run passes when it ends by itself, only the killed ranks died, it reports one
recovery per loss with exactly the killed ranks lost, the replicas agree and the final
fingerprint equals the reference. Prints one line per run and "md survive: runs R, wrong 0".
"""

import argparse
import os
import random
import re
import subprocess
import sys

FINGERPRINT = re.compile(r"final state fingerprint: ([0-9a-f]{16})")
SURVIVED = re.compile(r"survived: (\d+) recover\w+, ranks lost \[([0-9,]*)\], (\d+) of (\d+)")
KILLED = re.compile(r"rank (\d+) (?:was )?killed by")
TIMEOUT = 120
MD_ARGS = ["--atoms-cells", "5", "--steps", "60", "--survive"]


def run(commxrun, stack, program, launch, n, plan):
    env = dict(os.environ, COMMX_TIMEOUT="20")
    env.pop("COMMX_FAULTS", None)
    if plan:
        env["COMMX_FAULTS"] = plan
    if stack == "inproc":
        env["COMMX_INPROC_RANKS"] = str(n)
        cmd = [program, *MD_ARGS]
    else:
        cmd = [commxrun, "-n", str(n), *launch, "--keep-going", "--timeout", str(TIMEOUT - 20),
               program, *MD_ARGS]
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired:
        return None, "no end within the time limit"
    return done.returncode, done.stdout


def judge(code, out, n, killed, reference, expected_code):
    """What is wrong with a run, or None; and its fingerprint."""
    if code is None:
        return out, None
    fingerprint = FINGERPRINT.search(out)
    survived = SURVIVED.search(out)
    if not fingerprint or not survived:
        return f"no report (exit {code}): {out.strip().splitlines()[-3:]}", None
    died = {int(r) for r in KILLED.findall(out)}
    if died != killed:
        return f"ranks {sorted(died)} died, the plan killed {sorted(killed)}", None
    if code != expected_code or "exited with status" in out:
        return f"exit {code}: {out.strip().splitlines()[-3:]}", None
    recoveries, lost, finished, total = survived.groups()
    lost = {int(r) for r in lost.split(",") if r}
    if lost != killed or int(finished) != n - len(killed) or int(total) != n:
        return f"reported lost {sorted(lost)}, {finished} of {total} finished", None
    # Ranks that die in the same step are lost in one recovery.
    allowed = range(1, len(killed) + 1) if killed else range(0, 1)
    if int(recoveries) not in allowed:
        return f"{recoveries} recoveries for {len(killed)} losses", None
    if "replicas agree: yes" not in out:
        return "replicas differ", None
    if reference and fingerprint.group(1) != reference:
        return f"fingerprint {fingerprint.group(1)}, without losses {reference}", None
    return None, fingerprint.group(1)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commxrun", required=True)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--ranks", type=int, default=5)
    p.add_argument("programs", nargs="+", metavar="STACK=PROGRAM[@LAUNCH ARGS]")
    args = p.parse_args()
    rng = random.Random(args.seed)
    n = args.ranks
    runs = wrong = 0
    for entry in args.programs:
        stack, target = entry.split("=", 1)
        program, _, launch = target.partition("@")
        launch = launch.split()
        code, out = run(args.commxrun, stack, program, launch, n, "")
        problem, reference = judge(code, out, n, set(), None, 0)
        runs += 1
        if problem:
            wrong += 1
            print(f"{stack}: no loss at {n} ranks: WRONG: {problem}", flush=True)
            continue
        print(f"{stack}: no loss at {n} ranks: fingerprint {reference}", flush=True)
        # Kills at collective sends 2..40: every rank makes at least one per step, so each
        # fires within the 60 steps, whatever the policy.
        three = rng.sample(range(n), 3)
        kills = ";".join(f"kill@{r}:coll={rng.randint(2, 40)}" for r in three)
        for what, ranks, plan, killed in [
            ("no loss, one rank fewer", n - 1, "", set()),
            ("rank 0 killed", n, f"seed={args.seed};kill@0:coll={rng.randint(2, 40)}", {0}),
            ("three killed", n, f"seed={args.seed};{kills}", set(three)),
        ]:
            # commxrun --keep-going exits with the first failing rank's status: SIGKILL's.
            expected_code = 128 + 9 if killed and stack != "inproc" else 0
            code, out = run(args.commxrun, stack, program, launch, ranks, plan)
            problem, _ = judge(code, out, ranks, killed, reference, expected_code)
            runs += 1
            if problem:
                wrong += 1
            print(f"{stack}: {what} ({plan or 'no faults'}): "
                  + (f"WRONG: {problem}" if problem else "same fingerprint"), flush=True)
    print(f"md survive: runs {runs}, wrong {wrong}")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
