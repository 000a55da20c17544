#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs nbody_wide as CosmoGrid ran GreeM: two sites, each its own job, joined by a wide link.

Site A and site B are wanemu's two network namespaces, joined by its emulated link (default
25 ms each way, 1 Gbit/s: MPWide's 50 ms RTT), with TCP's slow start after idle off in both, as
on tuned wide-area hosts. In each runs a commx-relay (the site's gateway,
CosmoGrid's communication node) and the site's job: `commxrun -n R` (shm, tcp, ... inside the
site) or `mpirun -np R` (--launcher mpirun). The jobs' first ranks, the sites' leaders, join a
wan job of their own through both relays (COMMX_WIDE_* variables). Site A's first rank is the
run's global rank 0: its lines are the run's report.

--kill TARGET --at-step K kills a process (SIGKILL) once site A has reported step K: a relay
(`relay-A`, `relay-B`) or a rank (`A:1`, `B:0`, ...), to show that every rank stops with an
error naming what was lost. Everything is bounded by --timeout and cleaned up: the jobs, the
relays, wanemu and its namespaces. Needs root (network namespaces).

  sudo examples/nbody_wide/two_sites.py --build build/release --stack shm -- --lattice 32

Exit status: 0 if both sites' jobs exited 0, else the first non-zero status (124 on timeout);
77 when it cannot run here (not root).
"""

import argparse
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "wan"))
from iperf_ceiling import ADDR_A, ADDR_B, Emulator  # noqa: E402

RELAY_PORT = 7211
WIDE_PORT = 7212


def start(command, env=None):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)


def stop(proc):
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def start_relay(relay, ns, site, addr, other, other_addr, token):
    proc = start(["ip", "netns", "exec", ns, "env", f"COMMX_TOKEN={token}", relay, "--site",
                  site, "--listen", f"{addr}:{RELAY_PORT}", "--route",
                  f"{other}={other_addr}:{RELAY_PORT}"])
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if "listening" not in line:
        stop(proc)
        raise RuntimeError(f"relay {site} did not start: {line}{proc.stderr.read()}")
    # Its warnings (strangers refused, links lost) must not fill a pipe nobody reads.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc


def site_command(args, ns, site, index, addr, token, extra, sessions):
    program = os.path.join(args.build, "examples", "nbody_wide", f"nbody_wide_{args.stack}")
    wide = {"COMMX_WIDE_RANK": str(index), "COMMX_WIDE_SIZE": "2",
            "COMMX_WIDE_ROOT": f"{ADDR_A}:{WIDE_PORT}", "COMMX_WIDE_TOKEN": token,
            "COMMX_WIDE_SITE": site, "COMMX_WIDE_ROOT_SITE": "A",
            "COMMX_WIDE_RELAY": f"{addr}:{RELAY_PORT}", "COMMX_WIDE_ADDR": addr,
            "COMMX_TIMEOUT": str(args.comm_timeout)}
    if args.launcher == "mpirun":
        launch = ["mpirun", "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none",
                  "--mca", "btl", "self,vader", "--mca", "mpi_yield_when_idle", "1",
                  "--mca", "orte_tmpdir_base", os.path.join(sessions, site)]
        for key in wide:
            launch += ["-x", key]
    else:
        launch = [os.path.join(args.build, "tools", "commxrun", "commxrun"), "-n",
                  str(args.ranks)]
    env = ["env"] + [f"{k}={v}" for k, v in wide.items()]
    if args.launcher == "mpirun":
        env += ["OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]
    return ["ip", "netns", "exec", ns] + env + launch + [program] + args.program_args + extra


def rank_process(job, rank):
    """The pid of the rank `rank` among a job's processes (COMMX_RANK or Open MPI's)."""
    pending = [job.pid]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pending += [int(c) for c in f.read().split()]
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:  # gone meanwhile
            continue
        mine = env.get(b"COMMX_RANK", env.get(b"OMPI_COMM_WORLD_RANK"))
        if mine == str(rank).encode() and pid != job.pid and b"COMMX_WIDE_RANK" in env \
                and exe.startswith("nbody_wide"):
            return pid
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--stack", default="shm", help="the sites' stack: nbody_wide_<stack>")
    parser.add_argument("--launcher", choices=["commxrun", "mpirun"], default="commxrun")
    parser.add_argument("--ranks", type=int, default=2, help="ranks per site")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="each way")
    parser.add_argument("--rate-mbit", type=float, default=1000.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="the whole run, seconds")
    parser.add_argument("--comm-timeout", type=float, default=60.0, help="COMMX_TIMEOUT")
    parser.add_argument("--kill", help="relay-A, relay-B or SITE:RANK")
    parser.add_argument("--at-step", type=int, default=2)
    parser.add_argument("--signal", choices=["KILL", "STOP"], default="KILL",
                        help="what --kill sends: SIGKILL, or SIGSTOP (a stalled process)")
    parser.add_argument("--site-b-extra", default="",
                        help="more program arguments for site B only (to test sites that "
                             "disagree)")
    parser.add_argument("program_args", nargs="*")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("two_sites.py: needs root (network namespaces)", file=sys.stderr)
        return 77
    token = secrets.token_hex(32)
    emulator = None
    relays = {}
    jobs = []
    timer = None
    sessions = None

    def stopped_by_signal(signum, _frame):
        raise SystemExit(128 + signum)  # runs the cleanup in `finally`

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stopped_by_signal)
    try:
        emulator = Emulator(os.path.join(args.build, "tools", "wanemu", "wanemu"),
                            f"nbw{os.getpid()}", args.delay_ms, args.rate_mbit, 0.0, 1, [], 0)
        # As on tuned wide-area hosts: TCP keeps its window across the idle time between
        # steps (the default restarts slow start after an idle RTO, and every step would
        # climb from 10 segments again).
        for ns in (emulator.ns_a, emulator.ns_b):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            "net.ipv4.tcp_slow_start_after_idle=0"], check=True, timeout=30)
        relay = os.path.join(args.build, "tools", "commx-relay", "commx-relay")
        relays["A"] = start_relay(relay, emulator.ns_a, "A", ADDR_A, "B", ADDR_B, token)
        relays["B"] = start_relay(relay, emulator.ns_b, "B", ADDR_B, "A", ADDR_A, token)
        # Open MPI's session directories: removed with the run (it leaves their base behind).
        sessions = tempfile.mkdtemp(prefix="nbody_wide_sessions_")
        jobs = [start(site_command(args, emulator.ns_a, "A", 0, ADDR_A, token, [], sessions)),
                start(site_command(args, emulator.ns_b, "B", 1, ADDR_B, token,
                                   args.site_b_extra.split(), sessions))]
        outputs = [[], []]
        errors = [[], []]

        def drain(i, stream, into):
            for line in stream:
                into.append(line)

        readers = [threading.Thread(target=drain, args=(i, jobs[i].stderr, errors[i]))
                   for i in range(2)]
        readers.append(threading.Thread(target=drain, args=(1, jobs[1].stdout, outputs[1])))
        for r in readers:
            r.start()
        deadline = time.monotonic() + args.timeout
        killed = args.kill is None
        timer = threading.Timer(args.timeout, lambda: [stop(j) for j in jobs])
        timer.daemon = True
        timer.start()
        for line in jobs[0].stdout:
            outputs[0].append(line)
            print(line, end="", flush=True)
            fields = re.sub(r"^\[\d+\] ", "", line).split()  # commxrun's rank prefix, if any
            if not killed and len(fields) > 1 and fields[0] == "step" and \
                    fields[1].isdigit() and int(fields[1]) >= args.at_step:
                killed = True
                if args.kill.startswith("relay-"):
                    target = relays[args.kill[len("relay-"):]]
                    target.send_signal(signal.SIGKILL)
                    print(f"two_sites.py: killed the relay of site {args.kill[6:]}", flush=True)
                else:
                    site, rank = args.kill.split(":")
                    pid = rank_process(jobs[0 if site == "A" else 1], int(rank))
                    if pid is None:
                        raise RuntimeError(f"no process for rank {rank} at site {site}")
                    os.kill(pid, getattr(signal, "SIG" + args.signal))
                    verb = "killed" if args.signal == "KILL" else "stopped"
                    print(f"two_sites.py: {verb} rank {rank} of site {site}", flush=True)
        try:
            codes = [job.wait(timeout=max(deadline - time.monotonic(), 1)) for job in jobs]
        except subprocess.TimeoutExpired:
            return 124
        for r in readers:
            r.join(timeout=10)
        timed_out = time.monotonic() > deadline
        for i, site in enumerate("AB"):
            if i == 1:
                for line in outputs[1]:
                    print(f"[site B] {line}", end="")
            for line in errors[i]:
                print(f"[site {site} stderr] {line}", end="", file=sys.stderr)
            print(f"two_sites.py: site {site} exited {codes[i]}", flush=True)
        if timed_out:
            return 124
        return next((c for c in codes if c != 0), 0)
    finally:
        if timer is not None:
            timer.cancel()
        for job in jobs:
            stop(job)
        for proc in relays.values():
            stop(proc)
        if emulator is not None:
            emulator.stop()
        if sessions is not None:
            shutil.rmtree(sessions, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
