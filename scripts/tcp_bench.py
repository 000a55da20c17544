#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tcp transport side by side with Open MPI over TCP only, iperf3 and raw loopback TCP.

Runs ROUNDS interleaved rounds of: bench_pingpong_tcp under commxrun --bind-to core,
bench_mpi_pingpong under mpirun --mca btl self,tcp (which binds 2 ranks to cores by default,
so both are bound alike), one iperf3 stream on loopback (its default 128 KiB writes and reads,
and with -l 1M, iperf3's largest), and bench_tcp_stream (raw TCP: 4 MiB messages written from
one buffer and read into one buffer, no library); takes each figure's median over the rounds
and prints it with the ratios the tcp issue sets as goals, each the median of the ratios
within a round (with their range):
  8-byte half round trip, commx / Open MPI                       (goal <= 0.9)
  4 MiB windowed bandwidth into one receive buffer, commx / iperf3 (goal >= 0.95)
and the windowed run into 64 receive buffers (256 MiB of destinations) and the 4 MiB
ping-pong beside them.
Usage: scripts/tcp_bench.py BUILD_DIR [ROUNDS [CSV]]
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
csv_out = sys.argv[3] if len(sys.argv) > 3 else None  # the table as CSV too
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


def cpu_seconds(pid):
    """User + system CPU of one process so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                found += [int(child)] + descendants(int(child))
    return found


def commx_cpu():
    """CPU seconds per GiB of both ranks in the middle of a 5 s one-buffer windowed run: from
    2 s to 4 s, well inside Google Benchmark's final run, away from start-up and set-up."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        job = subprocess.Popen([commxrun, "-n", "2", "--bind-to", "core", "--timeout", "600",
                                os.path.join(build, "bench/bench_pingpong_tcp"),
                                "--benchmark_filter=^bandwidth-onebuf/.*/4194304/",
                                "--benchmark_min_time=5", f"--benchmark_out={out.name}",
                                "--benchmark_out_format=json"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        ranks = descendants(job.pid)
        before = sum(cpu_seconds(p) for p in ranks)
        time.sleep(2)
        used = sum(cpu_seconds(p) for p in ranks) - before
        if job.wait(timeout=600) != 0:
            raise RuntimeError("bench_pingpong_tcp failed")
        rate = json.load(open(out.name))["benchmarks"][0]["bytes_per_second"] / 2**30
    return used / (rate * 2)


def reap(process):
    """Waits for `process`; its CPU seconds (and its children's)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{process.args[0]} failed")
    return usage.ru_utime + usage.ru_stime


def raw_tcp():
    """(MiB/s, CPU s/GiB) of raw TCP moving 4 MiB messages for 3 s (the sender is a child)."""
    run = subprocess.Popen([os.path.join(build, "bench/bench_tcp_stream"), str(4 << 20), "3"],
                           stdout=subprocess.PIPE, text=True)
    out = run.stdout.read()
    used = reap(run)
    rate = float(out.split()[-2])  # "... N MiB/s"
    return rate, used / (rate / 1024 * 3)


def iperf3(*extra):
    """(MiB/s, CPU s/GiB of server and client) of one iperf3 stream for 3 s."""
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "--forceflush", "-p", port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in server.stdout:  # the server says when it listens
        if "listening" in line:
            break
    client = subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "3", "-P", "1",
                               "-J", *extra], stdout=subprocess.PIPE, text=True)
    out = client.stdout.read()
    used = reap(client)
    server.stdout.read()
    used += reap(server)
    rate = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / 2**20
    return rate, used / (rate / 1024 * 3)


commxrun = os.path.join(build, "tools/commxrun/commxrun")
runs = {"commx": [], "openmpi": [], "iperf3": [], "iperf3_1M": [], "raw": [], "commx_cpu": [],
        "iperf3_cpu": [], "raw_cpu": []}
load = []
for r in range(rounds):
    load.append(os.getloadavg()[0])
    runs["commx"].append(gbench([commxrun, "-n", "2", "--bind-to", "core", "--timeout", "600",
                                 os.path.join(build, "bench/bench_pingpong_tcp")]))
    runs["openmpi"].append(gbench(["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl",
                                   "self,tcp", os.path.join(build, "bench/bench_mpi_pingpong")]))
    rate, cpu = iperf3()
    runs["iperf3"].append(rate)
    runs["iperf3_cpu"].append(cpu)
    runs["iperf3_1M"].append(iperf3("-l", "1M")[0])
    rate, cpu = raw_tcp()
    runs["raw"].append(rate)
    runs["raw_cpu"].append(cpu)
    runs["commx_cpu"].append(commx_cpu())


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
rows = [
    ["8 B half round trip", f"{median('commx', lat):.1f} us", f"{median('openmpi', lat):.1f} us",
     ratio(values('commx', lat), values('openmpi', lat), 'Open MPI ')],
    ["4 MiB windowed, one receive buffer", f"{median('commx', one):.0f} MiB/s",
     f"{median('openmpi', one):.0f} MiB/s",
     f"{ratio(values('commx', one), ip, 'iperf3 ')}, {ratio(values('commx', one), raw, 'raw ')}, "
     f"{ratio(values('commx', one), values('openmpi', one), 'Open MPI ')}"],
    ["4 MiB windowed, 64 receive buffers", f"{median('commx', many):.0f} MiB/s",
     f"{median('openmpi', many):.0f} MiB/s",
     f"{ratio(values('commx', many), ip, 'iperf3 ')}, "
     f"{ratio(values('commx', many), values('openmpi', many), 'Open MPI ')}"],
    ["4 MiB ping-pong", f"{median('commx', pp):.0f} MiB/s", f"{median('openmpi', pp):.0f} MiB/s",
     f"{ratio(values('commx', pp), ip, 'iperf3 ')}, "
     f"{ratio(values('commx', pp), values('openmpi', pp), 'Open MPI ')}"],
]
header = ["figure", "commx tcp", "Open MPI (btl self,tcp)", "ratios, median of the rounds' (range)"]
print("| " + " | ".join(header) + " |")
print("|---|---|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
if csv_out:  # for bench/current_figures.py
    import csv
    with open(csv_out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
print(f"references: iperf3 1 stream {statistics.median(ip):.0f} MiB/s (128 KiB writes), "
      f"{statistics.median(ip1):.0f} MiB/s (-l 1M); raw TCP, 4 MiB messages "
      f"{statistics.median(raw):.0f} MiB/s = {ratio(raw, ip, 'iperf3 ')}")
print(f"CPU seconds per GiB moved, both ends: commx (one-buffer windowed) "
      f"{median('commx_cpu'):.3f}, raw TCP 4 MiB {median('raw_cpu'):.3f}, iperf3 "
      f"{median('iperf3_cpu'):.3f}; commx / raw {ratio(values('commx_cpu'), values('raw_cpu'))}, "
      f"commx / iperf3 {ratio(values('commx_cpu'), values('iperf3_cpu'))}")
