#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What TLS (COMMX_TLS=on) costs, measured side by side with it off, in interleaved rounds.

Loopback (any user): the tcp stack's 4 MiB windowed bandwidth and 8 B half round trip
(bench_pingpong_tcp), and one wan path's 64 MiB rate with 4 streams (wan_scenario bench).
With --wanemu (root): the wan path over the emulated link (1 Gbit/s, 25 ms each way), as
bench/wan/wan_streams.py runs it. Prints medians and on/off ratios, with the load average.

  python3 bench/tls_cost.py --build build/release [--rounds 5] [--wanemu build/release/tools/wanemu/wanemu]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "wan"))


def loopback_tcp(build, tls, out):
    """bench_pingpong_tcp at 8 B and 4 MiB: {(measure, bytes): value}."""
    env = dict(os.environ, COMMX_TLS=tls)
    subprocess.run([f"{build}/tools/commxrun/commxrun", "-n", "2", "--timeout", "300",
                    f"{build}/bench/bench_pingpong_tcp",
                    "--benchmark_filter=^(pingpong|bandwidth)/commx-tcp/(8|4194304)/",
                    "--benchmark_min_time=1", "--benchmark_out_format=json",
                    f"--benchmark_out={out}"], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        results = {}
        for b in json.load(f)["benchmarks"]:
            measure, _, size = b["name"].split("/")[:3]
            value = b["half_rtt"] * 1e6 if measure == "pingpong" else b["bytes_per_second"] / 1e9
            results[(measure, int(size))] = value
        return results


def wan_rate(scenario, commxrun, tls, mib, streams):
    """One wan path on loopback: Mbit/s of `wan_scenario bench`, window 4."""
    env = dict(os.environ, COMMX_TLS=tls, COMMX_WAN_STREAMS=str(streams), COMMX_WAN_CHUNK="1M")
    done = subprocess.run([commxrun, "-n", "2", "--timeout", "300", scenario, "bench", str(mib),
                           "2", "4"], env=env, check=True, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if "wan_bench" in line:
            fields = dict(f.split("=") for f in line.split("wan_bench", 1)[1].split())
            return float(fields["mbit"])
    raise RuntimeError("no wan_bench line:\n" + done.stdout + done.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="a release build directory")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wanemu", help="also over wanemu's emulated link (needs root)")
    parser.add_argument("--link-mib", type=int, default=64)
    parser.add_argument("--csv", help="the table as CSV too (bench/current_figures.py)")
    args = parser.parse_args()
    scenario = f"{args.build}/tests/transport/wan/wan_scenario"
    commxrun = f"{args.build}/tools/commxrun/commxrun"
    print(f"load average before: {os.getloadavg()}", flush=True)
    samples = {}

    def add(key, value):
        samples.setdefault(key, []).append(value)

    emu = None
    if args.wanemu:
        from iperf_ceiling import Emulator  # noqa: E402
        from wan_streams import run_wan  # noqa: E402
        emu = Emulator(args.wanemu, f"commx-tls{os.getpid()}-", 25, 1000, 0, 1, [], -10)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                for tls in order:
                    for key, value in loopback_tcp(args.build, tls, f"{tmp}/pp.json").items():
                        add(("tcp loopback",) + key + (tls,), value)
                    add(("wan loopback", "rate", 64, tls), wan_rate(scenario, commxrun, tls, 64, 4))
                    if emu:
                        mbit, err = run_wan(emu, scenario, args.link_mib, 2, 2,
                                            {"COMMX_WAN_STREAMS": "4", "COMMX_WAN_CHUNK": "1M",
                                             "COMMX_TLS": tls}, -10, 900)
                        if mbit is None:
                            raise RuntimeError(err)
                        add(("wan emulated link", "rate", args.link_mib, tls), mbit)
                print(f"round {r + 1} done, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if emu:
            emu.stop()
    print(f"load average after: {os.getloadavg()}")
    units = {"pingpong": "us half RTT", "bandwidth": "GB/s", "rate": "Mbit/s"}
    print(f"medians of {args.rounds} interleaved rounds")
    header = ["path", "measure", "bytes", "TLS off", "TLS on", "on/off"]
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|")
    table = []
    for key in sorted({k[:3] for k in samples}):
        off = statistics.median(samples[key + ("off",)])
        on = statistics.median(samples[key + ("on",)])
        size = f"{key[2] >> 20} MiB" if key[2] >= 1 << 20 else f"{key[2]} B"
        if key[0] != "tcp loopback":
            size = f"{key[2]} MiB"
        table.append([key[0], f"{key[1]} ({units[key[1]]})", size, f"{off:.3g}", f"{on:.3g}",
                      f"{on / off:.2f}x"])
        print("| " + " | ".join(table[-1]) + " |")
    if args.csv:
        import csv
        with open(args.csv, "w", newline="") as f:
            csv.writer(f).writerows([header, *table])


if __name__ == "__main__":
    main()
