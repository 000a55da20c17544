# SPDX-License-Identifier: MIT
"""The ranks of a job started by hand, as stranger_flood.py and scale_two_hosts.py start them:
each a process with its own log file, reported when it fails, and stopped however the test
ends."""

import os
import re
import subprocess


def start(procs, command, env, rank, log_prefix):
    """Starts rank `rank` (COMMX_RANK in its environment) and appends (rank, process, log)."""
    out = open(f"{log_prefix}.rank{rank}.log", "w+")
    p = subprocess.Popen(command, env=dict(env, COMMX_RANK=str(rank)), stdout=out,
                         stderr=subprocess.STDOUT)
    procs.append((rank, p, out))


def log_of(entry):
    """What a rank wrote so far."""
    entry[2].seek(0)
    return entry[2].read()


def failed(procs, shown=4):
    """The ranks that exited non-zero. Of the first `shown` of them, the lines that name an
    error (a library's fatal message may be followed by a long backtrace) and the last lines
    are printed, and the whole log is kept under a name of its own (`<log>.failed.<pid>`):
    the next run of the test writes its logs over the first ones."""
    bad = [rank for rank, p, _ in procs if p.returncode != 0]
    for entry in procs:
        if entry[0] not in bad[:shown]:
            continue
        text = log_of(entry)
        errors = [line for line in text.splitlines()
                  if re.search(r"error|fatal|abort|what\(\)|assert", line, re.IGNORECASE)]
        kept = f"{entry[2].name}.failed.{os.getpid()}"
        with open(kept, "w") as copy:
            copy.write(text)
        print(f"--- rank {entry[0]} (whole log: {os.path.abspath(kept)}):")
        if errors:
            print("lines naming an error:\n" + "\n".join(line[:300] for line in errors[:12]))
        print(f"last lines:\n{text[-1500:]}")
    return bad


def stop(procs):
    """Kills the ranks still running and closes every log."""
    for _, p, out in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        out.close()
