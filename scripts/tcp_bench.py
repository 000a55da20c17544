#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tcp transport side by side with Open MPI over TCP only, iperf3 and raw loopback TCP.

Runs ROUNDS interleaved rounds of: bench_pingpong_tcp under commxrun, bench_mpi_pingpong under
mpirun --mca btl self,tcp, one iperf3 stream on loopback (its default 128 KiB writes and reads,
and with -l 1M, iperf3's largest), and bench_tcp_stream (raw TCP: 4 MiB messages written from
one buffer and read into one buffer, no library); takes each figure's median over the rounds
and prints it with the ratios the tcp issue sets as goals, each the median of the ratios
within a round (with their range):
  8-byte half round trip, commx / Open MPI                       (goal <= 0.9)
  4 MiB windowed bandwidth into one receive buffer, commx / iperf3 (goal >= 0.95)
and the windowed run into 64 receive buffers (256 MiB of destinations) and the 4 MiB
ping-pong beside them.
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
        if kind.startswith("bandwidth"):
            figures[key] = b["bytes_per_second"] / 2**20  # MiB/s
        if kind == "pingpong" and key[1] != 8:
            figures[key] = b["bytes_per_second"] / 2**20
    return figures


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3(*extra):
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "--forceflush", "-p", port], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:  # the server says when it listens
            if "listening" in line:
                break
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "3", "-P", "1", "-J",
                            *extra], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 2**20
    finally:
        server.stdout.close()
        server.wait(timeout=30)


def raw_tcp():
    r = subprocess.run([os.path.join(build, "bench/bench_tcp_stream"), str(4 << 20), "3"],
                       capture_output=True, text=True, timeout=60, check=True)
    return float(r.stdout.split()[-2])  # "... N MiB/s"


commxrun = os.path.join(build, "tools/commxrun/commxrun")
runs = {"commx": [], "openmpi": [], "iperf3": [], "iperf3_1M": [], "raw": []}
load = []
for r in range(rounds):
    load.append(os.getloadavg()[0])
    runs["commx"].append(gbench([commxrun, "-n", "2", "--timeout", "600",
                                 os.path.join(build, "bench/bench_pingpong_tcp")]))
    runs["openmpi"].append(gbench(["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl",
                                   "self,tcp", os.path.join(build, "bench/bench_mpi_pingpong")]))
    runs["iperf3"].append(iperf3())
    runs["iperf3_1M"].append(iperf3("-l", "1M"))
    runs["raw"].append(raw_tcp())


def values(stack, key=None):
    return [run if key is None else run[key] for run in runs[stack]]


def median(stack, key=None):
    return statistics.median(values(stack, key))


def ratio(a, b, goal=""):
    """Median and range of the per-round ratios a / b (lists of one value per round)."""
    per_round = [x / y for x, y in zip(a, b)]
    return (f"{statistics.median(per_round):.2f}x {goal}"
            f"({min(per_round):.2f}-{max(per_round):.2f})")


lat = ("pingpong", 8)
one = ("bandwidth-onebuf", 4194304)
many = ("bandwidth", 4194304)
pp = ("pingpong", 4194304)
ip, ip1, raw = values("iperf3"), values("iperf3_1M"), values("raw")
print(f"medians of {rounds} interleaved rounds (load average at the rounds' start: "
      f"{', '.join(f'{l:.1f}' for l in load)})")
print("| figure | commx tcp | Open MPI (btl self,tcp) | ratios, median of the rounds' (range) |")
print("|---|---|---|---|")
print(f"| 8 B half round trip | {median('commx', lat):.1f} us | {median('openmpi', lat):.1f} us "
      f"| {ratio(values('commx', lat), values('openmpi', lat), 'Open MPI ')} |")
print(f"| 4 MiB windowed, one receive buffer | {median('commx', one):.0f} MiB/s "
      f"| {median('openmpi', one):.0f} MiB/s "
      f"| {ratio(values('commx', one), ip, 'iperf3 ')}, {ratio(values('commx', one), raw, 'raw ')}, "
      f"{ratio(values('commx', one), values('openmpi', one), 'Open MPI ')} |")
print(f"| 4 MiB windowed, 64 receive buffers | {median('commx', many):.0f} MiB/s "
      f"| {median('openmpi', many):.0f} MiB/s "
      f"| {ratio(values('commx', many), ip, 'iperf3 ')}, "
      f"{ratio(values('commx', many), values('openmpi', many), 'Open MPI ')} |")
print(f"| 4 MiB ping-pong | {median('commx', pp):.0f} MiB/s | {median('openmpi', pp):.0f} MiB/s "
      f"| {ratio(values('commx', pp), ip, 'iperf3 ')}, "
      f"{ratio(values('commx', pp), values('openmpi', pp), 'Open MPI ')} |")
print(f"references: iperf3 1 stream {statistics.median(ip):.0f} MiB/s (128 KiB writes), "
      f"{statistics.median(ip1):.0f} MiB/s (-l 1M); raw TCP, 4 MiB messages "
      f"{statistics.median(raw):.0f} MiB/s = {ratio(raw, ip, 'iperf3 ')}")
