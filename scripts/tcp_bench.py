#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tcp transport side by side with Open MPI over TCP only and with one iperf3 stream.

Runs ROUNDS interleaved rounds of: bench_pingpong_tcp under commxrun, bench_mpi_pingpong under
mpirun --mca btl self,tcp, and iperf3 on loopback (one stream); takes each figure's median over
the rounds and prints the ratios the tcp issue sets as goals:
  8-byte half round trip, commx / Open MPI   (goal <= 0.9)
  4 MiB windowed bandwidth, commx / iperf3   (goal >= 0.95)
Usage: scripts/tcp_bench.py BUILD_DIR [ROUNDS]
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FILTER = "/8/|/4194304/"
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def gbench(cmd):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(cmd + [f"--benchmark_filter={FILTER}", "--benchmark_min_time=1",
                              f"--benchmark_out={out.name}", "--benchmark_out_format=json"],
                       env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        data = json.load(open(out.name))
    figures = {}
    for b in data["benchmarks"]:
        kind, _, size = b["name"].split("/")[:3]
        key = (kind, int(size))
        figures[key] = b["half_rtt"] * 1e6 if kind == "pingpong" and "half_rtt" in b else None
        if kind == "pingpong" and key[1] == 8:
            figures[key] = b["real_time"] / 2 / 1000  # us, half round trip
        if kind == "bandwidth":
            figures[key] = b["bytes_per_second"] / 2**20  # MiB/s
        if kind == "pingpong" and key[1] != 8:
            figures[key] = b["bytes_per_second"] / 2**20
    return figures


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3():
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "--forceflush", "-p", port], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:  # the server says when it listens
            if "listening" in line:
                break
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "3", "-P", "1", "-J"],
                           capture_output=True, text=True, timeout=60, check=True)
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 2**20
    finally:
        server.stdout.close()
        server.wait(timeout=30)


commxrun = os.path.join(build, "tools/commxrun/commxrun")
runs = {"commx": [], "openmpi": [], "iperf3": []}
for r in range(rounds):
    runs["commx"].append(gbench([commxrun, "-n", "2", "--timeout", "600",
                                 os.path.join(build, "bench/bench_pingpong_tcp")]))
    runs["openmpi"].append(gbench(["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl",
                                   "self,tcp", os.path.join(build, "bench/bench_mpi_pingpong")]))
    runs["iperf3"].append(iperf3())


def median(stack, key):
    return statistics.median(run[key] for run in runs[stack])


lat_c, lat_m = median("commx", ("pingpong", 8)), median("openmpi", ("pingpong", 8))
bw_c, bw_m = median("commx", ("bandwidth", 4194304)), median("openmpi", ("bandwidth", 4194304))
pp_c, pp_m = median("commx", ("pingpong", 4194304)), median("openmpi", ("pingpong", 4194304))
ip = statistics.median(runs["iperf3"])
print(f"medians of {rounds} interleaved rounds (load average {os.getloadavg()[0]:.1f})")
print(f"| figure | commx tcp | Open MPI (btl self,tcp) | iperf3, 1 stream | ratio |")
print(f"|---|---|---|---|---|")
print(f"| 8 B half round trip | {lat_c:.1f} us | {lat_m:.1f} us | | {lat_c / lat_m:.2f}x Open MPI |")
print(f"| 4 MiB windowed bandwidth | {bw_c:.0f} MiB/s | {bw_m:.0f} MiB/s | {ip:.0f} MiB/s "
      f"| {bw_c / ip:.2f}x iperf3, {bw_c / bw_m:.2f}x Open MPI |")
print(f"| 4 MiB ping-pong bandwidth | {pp_c:.0f} MiB/s | {pp_m:.0f} MiB/s | | "
      f"{pp_c / ip:.2f}x iperf3, {pp_c / pp_m:.2f}x Open MPI |")
