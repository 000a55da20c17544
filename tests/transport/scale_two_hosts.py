#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A job of N ranks across two hosts: two network namespaces joined by a veth pair, half the
ranks in each (rank 0 in the first), every rank started at once with `ip netns exec`.

The job is scale_job (ring neighbours, its descriptor and memory bounds), so every rank but
those at the two ends of each half talks across the link, and rank 0 takes N-1 joins, half of
them from the other host, whose connections are closed once every rank has the table. Needs root and iproute2's ip; the namespaces are removed
however the job ends, and every process is bounded in time.

    scale_two_hosts.py <scale_job program> <ranks> [program args...]
"""

import os
import secrets
import subprocess
import sys
import time

import rank_processes

DEADLINE_S = 200


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


def main():
    program, ranks, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if os.geteuid() != 0:
        print("skipped: network namespaces need root")
        return 0
    tag = os.getpid() % 100000
    hosts = [f"commx_sa{tag}", f"commx_sb{tag}"]
    subnet = f"10.{200 + tag % 50}.{tag % 250}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    veths = [f"cxa{tag}", f"cxb{tag}"]
    procs = []
    try:
        for ns in hosts:
            ip("netns", "add", ns)
        ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for ns, veth, address in zip(hosts, veths, addresses):
            ip("link", "set", veth, "netns", ns)
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", veth)
            ip("-n", ns, "link", "set", veth, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        env = dict(os.environ, COMMX_SIZE=str(ranks), COMMX_ROOT=f"{addresses[0]}:29500",
                   COMMX_TOKEN=secrets.token_hex(32), COMMX_TIMEOUT="120")
        for rank in range(ranks):
            host = 0 if rank < ranks // 2 else 1
            rank_processes.start(procs, ["ip", "netns", "exec", hosts[host], program, *extra],
                                 env, rank, "scale_two_hosts")
        until = time.monotonic() + DEADLINE_S
        for rank, p, out in procs:
            try:
                p.wait(timeout=max(1.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                sys.exit(f"rank {rank} did not end within {DEADLINE_S} s")
        print(rank_processes.log_of(procs[0])[-1500:])
        failed = rank_processes.failed(procs)
        if failed:
            sys.exit(f"ranks failed: {failed}")
        print(f"{ranks} ranks started across two hosts and passed the ring's checks")
        return 0
    finally:
        rank_processes.stop(procs)
        for ns in hosts:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
