#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An allreduce across two sites joined by wanemu, per collectives policy, one stack (wan).

Two sites of two ranks (ranks 0, 1 in one network namespace at site A, ranks 2, 3 in the other
at site B; the ranks of a namespace share its address, so each site is one node) run
bench_wan_allreduce over the emulated link (default 1 Gbit/s, 25 ms each way: 50 ms RTT), with
coll::hierarchical (node, site, then across the sites once), binomial and ring. Each job makes
one unmeasured call and `--calls` measured ones and reports the median call (the slowest
rank's time) and the bytes that crossed between the sites per call. Rounds are interleaved:
each round runs every size and policy once, in an order that rotates from round to round; the
table gives the median of the rounds' medians and their spread. The reference is one
wide-area exchange of the message at the link rate plus one round trip (size / rate + RTT).

TCP's restart after idle is off in both namespaces (net.ipv4.tcp_slow_start_after_idle=0), as
on tuned wide-area hosts: calls are separated by idle time, and the window should survive it.

  sudo bench/wan/wan_allreduce.py --wanemu build/release/tools/wanemu/wanemu \\
      --bench build/release/bench/bench_wan_allreduce [--sizes 8,64] [--rounds 5]
"""

import argparse
import itertools
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iperf_ceiling import ADDR_A, ADDR_B, Emulator, run_all  # noqa: E402

TOKEN = "c" * 64
POLICIES = ["hierarchical", "binomial", "ring"]


def run_job(emu, bench, policy, mib, calls, env, nice, timeout):
    """One 4-rank job; the fields of rank 0's report line, or None and the ranks' stderr."""
    common = ["COMMX_SIZE=4", f"COMMX_ROOT={ADDR_A}:17100", f"COMMX_TOKEN={TOKEN}",
              "COMMX_TIMEOUT=120"] + [f"{k}={v}" for k, v in env.items()]
    commands = []
    for rank in range(4):
        ns, addr, site = (emu.ns_a, ADDR_A, "A") if rank < 2 else (emu.ns_b, ADDR_B, "B")
        commands.append(["nice", "-n", str(nice), "ip", "netns", "exec", ns, "env",
                         f"COMMX_RANK={rank}", f"COMMX_ADDR={addr}", f"COMMX_SITE={site}"]
                        + common + [bench, policy, str(mib), str(calls)])
    outs = run_all(commands, timeout)
    err = "".join(o[1] for o in outs)
    for line in outs[0][0].splitlines():
        if line.startswith("wan_allreduce"):
            return dict(f.split("=") for f in line.split()[1:]), err
    return None, err


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wanemu", required=True)
    parser.add_argument("--bench", required=True, action="append",
                        help="path of bench_wan_allreduce (the wan stack) or of "
                             "bench_wan_allreduce_shm_tcp_wan (the layered stack); may be "
                             "given twice, to compare them in the same rounds")
    parser.add_argument("--sizes", default="8,64", help="MiB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=25)
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--streams", default="8")
    parser.add_argument("--chunk", default="1M")
    parser.add_argument("--nice", type=int, default=-10)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--pace", type=float, default=0,
                        help="pace each stream of the paths between the sites to this fraction "
                             "of its share of the link rate (a COMMX_WAN_PATHS file: the paths "
                             "within a site stay unpaced); 0: unpaced")
    args = parser.parse_args()
    policies = args.policies.split(",")
    if os.geteuid() != 0:
        sys.exit("wan_allreduce: needs root (wanemu creates network namespaces)")
    sizes = [int(s) for s in args.sizes.split(",")]
    env = {"COMMX_WAN_STREAMS": args.streams, "COMMX_WAN_CHUNK": args.chunk}
    pacing = ""
    if args.pace > 0:
        rate = int(args.pace * args.rate_mbit * 1e6 / 8 / int(args.streams))
        path_file = f"/tmp/commx-wan-allreduce-paths-{os.getpid()}"
        with open(path_file, "w") as f:
            f.writelines(f"{a} {b} pacing={rate}\n" for a in (0, 1) for b in (2, 3))
        env["COMMX_WAN_PATHS"] = path_file
        pacing = f", the paths between the sites paced to {rate} B/s a stream"
    emu = Emulator(args.wanemu, f"commx-wanr{os.getpid()}-", args.delay_ms, args.rate_mbit, 0.0,
                   1, [], args.nice)
    print(emu.ready_line, flush=True)
    results = {}  # (mib, policy) -> [(median_s, crossed_per_call)]
    try:
        for ns in (emu.ns_a, emu.ns_b):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            "net.ipv4.tcp_slow_start_after_idle=0"], check=True, timeout=10)
        cells = [(bench, mib, policy) for bench in args.bench for mib in sizes
                 for policy in policies]
        for r in range(args.rounds):
            shift = r % len(cells)
            for bench, mib, policy in cells[shift:] + cells[:shift]:
                stack = os.path.basename(bench).removeprefix("bench_wan_allreduce").lstrip("_")
                stack = stack or "wan"
                fields, err = run_job(emu, bench, policy, mib, args.calls, env, args.nice,
                                      timeout=600)
                if fields is None:
                    print(f"round {r + 1} {stack} {policy} {mib} MiB failed:\n{err}",
                          file=sys.stderr)
                    continue
                median, crossed = float(fields["median_s"]), float(fields["crossed_per_call"])
                results.setdefault((stack, mib, policy), []).append((median, crossed))
                print(f"round {r + 1}: {stack} {policy} {mib} MiB {median:.3f} s, "
                      f"{crossed / (mib << 20):.2f} messages across", flush=True)
    finally:
        emu.stop()
        if args.pace > 0:
            os.remove(env["COMMX_WAN_PATHS"])
    rtt = 2 * args.delay_ms / 1000
    print(f"\n{args.rate_mbit:g} Mbit/s, {2 * args.delay_ms:g} ms RTT, {args.streams} streams"
          f"{pacing}, {args.rounds} rounds of {args.calls} calls; "
          f"load average {os.getloadavg()}")
    print("| stack | size | policy | call (median of rounds) | rounds' range | reference | ratio "
          "| bytes across per call |")
    print("|---|---|---|---|---|---|---|---|")
    stacks = sorted({stack for stack, _, _ in results})
    for stack, mib, policy in itertools.product(stacks, sizes, policies):
        reference = (mib << 20) * 8 / (args.rate_mbit * 1e6) + rtt
        got = results.get((stack, mib, policy), [])
        if not got:
            print(f"| {stack} | {mib} MiB | {policy} | failed | | | | |")
            continue
        times = [t for t, _ in got]
        t = statistics.median(times)
        crossed = statistics.median(c for _, c in got) / (mib << 20)
        print(f"| {stack} | {mib} MiB | {policy} | {t:.3f} s | {min(times):.3f}-{max(times):.3f} "
              f"| {reference:.3f} s | {t / reference:.2f}x | {crossed:.2f} x message |")

if __name__ == "__main__":
    main()
