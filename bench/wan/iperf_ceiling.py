#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""iperf3's throughput with P parallel streams across wanemu's emulated wide-area link.

This is the ceiling that the wan transport's benchmark compares against: MPWide's experiment
(1 Gbit/s, 50 ms RTT) in three cases, each on a fresh emulator:
  capped     socket buffers capped at 64 KiB (iperf3 -w 64K: SO_SNDBUF = SO_RCVBUF = 64 KiB on
             both ends, as at MPWide's sites)
  autotuned  the kernel's buffer autotuning (the namespaces inherit the host's tcp_rmem/tcp_wmem)
  loss       autotuned, with 0.1% random loss in each direction
and, with --emulator-ceiling, what wanemu itself sustains: no rate limit, same delay.

Needs root (wanemu creates network namespaces) and iperf3. Every process is bounded by a
timeout and stopped in `finally`, and wanemu removes its namespaces when stopped.

  sudo bench/wan/iperf_ceiling.py --wanemu build/release/tools/wanemu/wanemu
  ... --streams 1,4,16,64 --duration 10 --markdown out.md
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time

ADDR_A = "10.77.0.1"
ADDR_B = "10.77.0.2"

CASES = {
    "capped": {"window": "64K", "loss": 0.0, "rate_mbit": None},
    "autotuned": {"window": None, "loss": 0.0, "rate_mbit": None},
    "loss": {"window": None, "loss": 0.001, "rate_mbit": None},
    "emulator": {"window": None, "loss": 0.0, "rate_mbit": 0},  # no rate limit
}


class Emulator:
    """A running wanemu; stop() returns its counters."""

    def __init__(self, path, ns_prefix, delay_ms, rate_mbit, loss, seed, extra, nice):
        self.ns_a, self.ns_b = ns_prefix + "a", ns_prefix + "b"
        args = [path, "--ns-a", self.ns_a, "--ns-b", self.ns_b,
                "--addr-a", ADDR_A + "/24", "--addr-b", ADDR_B + "/24",
                "--delay-ms", str(delay_ms), "--rate-mbit", str(rate_mbit),
                "--loss", str(loss), "--seed", str(seed)] + extra
        # Run above the machine's other load (it blocks in epoll between packets).
        args = ["nice", "-n", str(nice)] + args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True)
        self.output = []
        deadline = time.monotonic() + 20
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            line = self.proc.stdout.readline() if ready else ""
            if not line:
                self.stop()
                raise RuntimeError("wanemu did not become ready:\n" + "".join(self.output))
            self.output.append(line)
            if line.startswith("wanemu: ready"):
                self.ready_line = line.strip()
                return

    def cpu_seconds(self):
        """wanemu's CPU time so far, all threads, user + system."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def device_drops(self):
        """Packets the TUN devices dropped before wanemu read them (transmit queue full)."""
        drops = 0
        for ns in (self.ns_a, self.ns_b):
            out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", "wan0"],
                                 capture_output=True, text=True, timeout=10).stdout
            drops += json.loads(out)[0]["stats64"]["tx"]["dropped"]
        return drops

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, _ = self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, _ = self.proc.communicate()
            self.output.append(out)
        for ns in (self.ns_a, self.ns_b):  # normally wanemu has removed them already
            if os.path.exists("/run/netns/" + ns):
                subprocess.run(["ip", "netns", "del", ns], check=False)
        stats = {}
        for line in "".join(self.output).splitlines():
            fields = line.split()
            if line.startswith("wanemu: stats"):
                stats[fields[2]] = {k: int(v) for k, v in (f.split("=") for f in fields[3:])}
            elif line.startswith("wanemu: cpu"):
                stats["cpu"] = {k: float(v) for k, v in (f.split("=") for f in fields[2:])}
        return stats


def run_all(commands, timeout):
    """Starts every command at once and waits for all; (stdout, stderr) of each, in order. A
    command still running at the timeout, or when another raised, is killed."""
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in commands]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


def wait_listening(ns, ports, deadline):
    """Waits (bounded) until every port listens in namespace ns."""
    while True:
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True,
                             text=True, timeout=10).stdout
        listening = {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines()
                     if line.strip()}
        if set(ports) <= listening:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"iperf3 servers did not listen on {ports} in {ns}")
        time.sleep(0.05)


def run_iperf(emu, streams, processes, duration, omit, window, congestion, nice):
    """One measurement from ns_a to ns_b: `streams` TCP streams spread over `processes` iperf3
    client/server pairs started together (iperf3 3.12 is single-threaded: one process cannot
    keep 64 streams' buffers full). Returns (received Mbit/s, retransmits, CPU % of the iperf3
    senders, CPU % of the receivers), summed over the pairs."""
    niced = ["nice", "-n", str(nice)]
    processes = max(1, min(processes, streams))
    counts = [streams // processes + (1 if k < streams % processes else 0)
              for k in range(processes)]
    ports = [5201 + k for k in range(processes)]
    servers = [subprocess.Popen(niced + ["ip", "netns", "exec", emu.ns_b, "iperf3", "-s", "-1",
                                         "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for port in ports]
    clients = []
    try:
        wait_listening(emu.ns_b, ports, time.monotonic() + 10)
        for port, count in zip(ports, counts):
            args = niced + ["ip", "netns", "exec", emu.ns_a, "iperf3", "-c", ADDR_B,
                            "-p", str(port), "-P", str(count), "-t", str(duration),
                            "-O", str(omit), "-J"]
            if window:
                args += ["-w", window]
            if congestion:
                args += ["-C", congestion]
            clients.append(subprocess.Popen(args, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True))
        total = [0.0, 0, 0.0, 0.0]
        for client in clients:
            out, err = client.communicate(timeout=duration + omit + 60)
            result = json.loads(out) if out.strip() else {}
            if "end" not in result or "sum_received" not in result["end"]:
                raise RuntimeError("iperf3 failed: " + (result.get("error") or err))
            end = result["end"]
            cpu = end.get("cpu_utilization_percent", {})
            total[0] += end["sum_received"]["bits_per_second"] / 1e6
            total[1] += end["sum_sent"].get("retransmits", 0)
            total[2] += cpu.get("host_total", 0)
            total[3] += cpu.get("remote_total", 0)
        return tuple(total)
    finally:
        for proc in clients + servers:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wanemu", required=True, help="path of the wanemu binary")
    parser.add_argument("--streams", default="1,4,16,64", help="comma-separated stream counts")
    parser.add_argument("--cases", default="capped,autotuned,loss",
                        help="comma-separated, of: " + ",".join(CASES))
    parser.add_argument("--delay-ms", type=float, default=25, help="one-way delay (25: 50 ms RTT)")
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--duration", type=int, default=10, help="seconds measured per run")
    parser.add_argument("--omit", type=int, default=2, help="seconds of slow start not counted")
    parser.add_argument("--congestion", default=None, help="TCP congestion control (iperf3 -C)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--processes", type=int, default=4,
                        help="iperf3 client/server pairs the streams are spread over")
    parser.add_argument("--wanemu-arg", action="append", default=[],
                        help="extra wanemu argument (repeatable), e.g. --wanemu-arg=--threads=1")
    parser.add_argument("--nice", type=int, default=-10,
                        help="niceness of wanemu and iperf3 (default -10: on a shared machine, "
                             "measure the link rather than the other load; run the transport's "
                             "benchmark at the same niceness)")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("iperf_ceiling: needs root (wanemu creates network namespaces)")
    extra = [part for a in args.wanemu_arg for part in a.split("=", 1)]
    streams = [int(s) for s in args.streams.split(",")]
    cases = args.cases.split(",")
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        default_cc = f.read().strip()
    cc = args.congestion or default_cc

    rows = []
    for case in cases:
        spec = CASES[case]
        rate = args.rate_mbit if spec["rate_mbit"] is None else spec["rate_mbit"]
        emu = Emulator(args.wanemu, f"commx-bench{os.getpid()}-", args.delay_ms, rate,
                       spec["loss"], args.seed, extra, args.nice)
        print(emu.ready_line, flush=True)
        results = {}
        try:
            for p in streams:
                cpu0, t0 = emu.cpu_seconds(), time.monotonic()
                mbit, retrans, cpu_client, cpu_server = run_iperf(
                    emu, p, args.processes, args.duration, args.omit, spec["window"],
                    args.congestion, args.nice)
                busy = (emu.cpu_seconds() - cpu0) / (time.monotonic() - t0)
                results[p] = (mbit, retrans, busy)
                print(f"{case:10s} streams={p:3d} {mbit:8.1f} Mbit/s retransmits={retrans} "
                      f"cpu: wanemu {100 * busy:.0f}% of a core, iperf3 sender {cpu_client:.0f}% "
                      f"receiver {cpu_server:.0f}%", flush=True)
            device_drops = emu.device_drops()
        finally:
            stats = emu.stop()
        drops = {d: {k: stats.get(d, {}).get(k, 0) for k in ("dropped_loss", "dropped_queue",
                                                             "dropped_ring", "write_errors")}
                 for d in ("a->b", "b->a")}
        print(f"{case:10s} drops {drops}, TUN transmit queue drops {device_drops}", flush=True)
        rows.append((case, rate, results))

    header = ("| case | link | " + " | ".join(f"{p} stream{'s' if p > 1 else ''}" for p in streams)
              + " | wanemu CPU (% of a core) |")
    lines = [f"iperf3 throughput (Mbit/s received), one-way delay {args.delay_ms:g} ms, "
             f"congestion control {cc}, {args.duration} s per run after {args.omit} s omitted, "
             f"nice {args.nice}, streams spread over up to {args.processes} iperf3 processes:",
             "", header, "|" + "---|" * (len(streams) + 3)]
    for case, rate, results in rows:
        link = f"{rate:g} Mbit/s" if rate else "unlimited"
        if CASES[case]["loss"]:
            link += f", {100 * CASES[case]['loss']:g}% loss"
        if CASES[case]["window"]:
            link += f", -w {CASES[case]['window']}"
        cells = " | ".join(f"{results[p][0]:.0f}" for p in streams)
        busy = "/".join(f"{100 * results[p][2]:.0f}" for p in streams)
        lines.append(f"| {case} | {link} | {cells} | {busy} |")
    table = "\n".join(lines)
    print("\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
