# SPDX-License-Identifier: MIT
"""What the recovery scripts (sweep.py, barrier_loop.py, silence.py) share: starting one run of
recovery_job, bounded in time, and reading what each rank said ("outcome rank=R ..." lines)."""

import argparse
import os
import re
import subprocess

OUTCOME = re.compile(r"outcome rank=(\d+) (.*)")
ROUND = re.compile(r"round (\d+) members=\[(.*)\]")


def ranks_in(text: str) -> tuple[int, ...]:
    """The ranks of a printed list's inside, "0, 2, 3"."""
    return tuple(int(x) for x in text.split(",") if x.strip())


def run_job(stack: str, program: str, n: int, mode: str, *, commxrun: str, timeout: float,
            env: dict[str, str], launch_args=()) -> str | None:
    """Output of recovery_job in `mode` at n ranks (threads on inproc, else under commxrun with
    --keep-going, which ends the job 10 s before `timeout`); None if it did not end in time."""
    env = dict(os.environ, **env)
    if stack == "inproc":
        env["COMMX_INPROC_RANKS"] = str(n)
        cmd = [program, mode]
    else:
        cmd = [commxrun, "-n", str(n), *launch_args, "--keep-going", "--timeout",
               str(timeout - 10), program, mode]
    for attempt in (1, 2):
        try:
            run = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return None
        # Every rank that runs recovery_job prints its outcomes, and commxrun reports every rank
        # that fails or is killed, so a run that printed nothing at all never reached the
        # recovery code: commxrun itself ended (seen once in CI, its status not recorded). Say
        # so, with its status, and launch once more; a second silent run is judged as it is.
        if run.stdout or stack == "inproc" or attempt == 2:
            return run.stdout
        print(f"{stack} n={n} {mode} {env.get('COMMX_FAULTS', '')}: commxrun ended with status "
              f"{run.returncode} and printed nothing; launching once more", flush=True)
    return None


def outcomes(out: str) -> dict[int, list[str]]:
    """What each rank said, in order."""
    said: dict[int, list[str]] = {}
    for line in out.splitlines():
        if m := OUTCOME.search(line):
            said.setdefault(int(m.group(1)), []).append(m.group(2))
    return said


def argument_parser(doc: str) -> argparse.ArgumentParser:
    """A script's arguments: --commxrun and the STACK=PROGRAM list; the script adds its own."""
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commxrun", required=True)
    p.add_argument("stacks", nargs="+", metavar="STACK=PROGRAM")
    return p
