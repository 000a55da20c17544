#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A job of N ranks starts while strangers flood rank 0's port.

Rank 0 starts alone; once its port answers, 400 connections that never say a word, and a
stream of garbage ones, are opened to it (more than the handshakes it serves at once), and
kept up; then ranks 1..N-1 start. The job must start and finish (scale_job's checks), and
rank 0 must have evicted silent strangers to let the ranks in (its log says so), which shows
the flood was there while they joined. Every process and socket is bounded in time.

    stranger_flood.py <scale_job program> <ranks> [program args...]
"""

import os
import secrets
import socket
import sys
import time

import rank_processes

SILENT = 400
DEADLINE_S = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port):
    s = socket.socket()
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", port))
        return s
    except OSError:
        s.close()
        return None


def main():
    program, ranks, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    port = free_port()
    env = dict(os.environ, COMMX_SIZE=str(ranks), COMMX_ROOT=f"127.0.0.1:{port}",
               COMMX_TOKEN=secrets.token_hex(32), COMMX_TIMEOUT="120")
    until = time.monotonic() + DEADLINE_S
    procs = []
    silent = []

    def start(rank):
        rank_processes.start(procs, [program, *extra], env, rank, "stranger_flood")

    try:
        start(0)
        while not silent:  # rank 0's port is open once a connection goes through
            if time.monotonic() > until or procs[0][1].poll() is not None:
                sys.exit("rank 0 never listened")
            s = connect(port)
            if s:
                silent.append(s)
            else:
                time.sleep(0.01)  # polling a port that is not open yet: nothing to wait on
        while len(silent) < SILENT:
            s = connect(port)
            if s:
                silent.append(s)
        print(f"{len(silent)} silent strangers at rank 0's port; starting ranks 1..{ranks - 1}")
        for rank in range(1, ranks):
            start(rank)
        garbage = 0
        while any(p.poll() is None for _, p, _ in procs):
            if time.monotonic() > until:
                sys.exit(f"the job did not end within {DEADLINE_S} s")
            # Keep the flood up: replace what rank 0 evicted, and send some garbage.
            s = connect(port)
            if s:
                if garbage % 2 == 0:
                    try:
                        s.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"." * 64)
                    except OSError:
                        pass
                    s.close()
                else:
                    silent.append(s)
                garbage += 1
            while len(silent) > 2 * SILENT:  # evicted ones are closed at rank 0's end
                silent.pop(0).close()
            time.sleep(0.005)  # a stranger's pace; the job's progress is checked above
        log0 = rank_processes.log_of(procs[0])
        print(log0[-2000:])
        print(f"{garbage} more strangers during the start-up")
        failed = rank_processes.failed(procs)
        if failed:
            sys.exit(f"ranks failed: {failed}")
        if "evicted before it proved the token" not in log0:
            sys.exit("rank 0 evicted no stranger: the flood did not reach its port in time")
        print("the job started and finished through the flood")
    finally:
        rank_processes.stop(procs)
        for s in silent:
            s.close()


if __name__ == "__main__":
    main()
