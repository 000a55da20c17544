# SPDX-License-Identifier: MIT
"""The ranks of a job started by hand, as stranger_flood.py and scale_two_hosts.py start them:
each a process with its own log file, reported when it fails, and stopped however the test
ends."""

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
    """The ranks that exited non-zero; the last lines of the first `shown` of them printed."""
    bad = [rank for rank, p, _ in procs if p.returncode != 0]
    for entry in procs:
        if entry[0] in bad[:shown]:
            print(f"--- rank {entry[0]}:\n{log_of(entry)[-1500:]}")
    return bad


def stop(procs):
    """Kills the ranks still running and closes every log."""
    for _, p, out in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        out.close()
