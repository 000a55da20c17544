#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transport::wan's throughput versus streams across wanemu, beside iperf3 in the same run.

MPWide's experiment: messages of 8, 64, 256 MiB from rank 0 (one namespace) to rank 1 (the
other) over an emulated 1 Gbit/s, 50 ms RTT link, with 1..64 streams per path, in the cases of
iperf_ceiling.py (capped: 64 KiB socket buffers; autotuned: the kernel's; loss: 0.1% each way),
plus the wan transport's own autotune (COMMX_WAN_AUTOTUNE=1). For each case and stream count,
iperf3 with the same streams runs on the same emulator right before: the ceiling. Slow parts
can be run on their own (--cases, --streams, --sizes).

Like iperf3 (and osu_bw), each measured round keeps the link busy: a window of messages (as
many as the ceiling carries in --round-seconds, at least 2) is in flight at once, so each
message's rendezvous overlaps the one before it. --exchange measures MPWide's way instead: one message at
a time, each answered before the next leaves (two round trips per message).

  sudo bench/wan/wan_streams.py --wanemu build/release/tools/wanemu/wanemu \\
      --scenario build/release/tests/transport/wan/wan_scenario [--streams 1,4,16] [--sizes 64]
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from iperf_ceiling import ADDR_A, ADDR_B, CASES, Emulator, run_all, run_iperf  # noqa: E402

TOKEN = "b" * 64


def run_wan(emu, scenario, mib, rounds, window, env, nice, timeout):
    """One two-rank job of `wan_scenario bench`; Mbit/s that rank 0 reports, or None."""
    common = [f"COMMX_SIZE=2", f"COMMX_ROOT={ADDR_A}:17000", f"COMMX_TOKEN={TOKEN}",
              "COMMX_TIMEOUT=120"] + [f"{k}={v}" for k, v in env.items()]
    outs = run_all([["nice", "-n", str(nice), "ip", "netns", "exec", ns, "env",
                     f"COMMX_RANK={rank}", f"COMMX_ADDR={addr}"] + common
                    + [scenario, "bench", str(mib), str(rounds), str(window)]
                    for rank, (ns, addr) in enumerate([(emu.ns_a, ADDR_A), (emu.ns_b, ADDR_B)])],
                   timeout)
    for line in outs[0][0].splitlines():
        if line.startswith("wan_bench"):
            fields = dict(f.split("=") for f in line.split()[1:])
            return float(fields["mbit"]), outs[0][1] + outs[1][1]
    return None, outs[0][1] + outs[1][1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wanemu", required=True)
    parser.add_argument("--scenario", required=True, help="path of wan_scenario")
    parser.add_argument("--streams", default="1,2,4,8,16,32,64")
    parser.add_argument("--sizes", default="8,64,256", help="message sizes, MiB")
    parser.add_argument("--cases", default="capped,autotuned,loss")
    parser.add_argument("--delay-ms", type=float, default=25)
    parser.add_argument("--rate-mbit", type=float, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iperf-duration", type=int, default=6)
    parser.add_argument("--nice", type=int, default=-10)
    parser.add_argument("--chunk", default="1M")
    parser.add_argument("--round-seconds", type=float, default=4,
                        help="a window of messages lasts about this long at the ceiling")
    parser.add_argument("--max-seconds", type=float, default=90,
                        help="skip a cell whose job would take longer at the ceiling")
    parser.add_argument("--exchange", action="store_true",
                        help="one message at a time, each answered (MPWide's exchange)")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("wan_streams: needs root (wanemu creates network namespaces)")
    streams = [int(s) for s in args.streams.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    lines = []
    for case in args.cases.split(","):
        spec = CASES[case]
        emu = Emulator(args.wanemu, f"commx-wanb{os.getpid()}-", args.delay_ms, args.rate_mbit,
                       spec["loss"], 1, [], args.nice)
        print(emu.ready_line, flush=True)
        base = {"COMMX_WAN_CHUNK": args.chunk}
        if spec["window"]:
            base.update({"COMMX_WAN_SNDBUF": "64K", "COMMX_WAN_RCVBUF": "64K"})
        try:
            for p in streams + ["autotune"]:
                env = dict(base)
                if p == "autotune":
                    env.update({"COMMX_WAN_AUTOTUNE": "1", "COMMX_WAN_STREAMS": "1"})
                    ceiling = None
                else:
                    env["COMMX_WAN_STREAMS"] = str(p)
                    ceiling = run_iperf(emu, p, 4, args.iperf_duration, 1, spec["window"], None,
                                        args.nice)[0]
                cells = []
                for mib in sizes:
                    rate = (ceiling or args.rate_mbit) * 1e6 / 8
                    window = 1 if args.exchange else \
                        max(2, min(64, math.ceil(rate * args.round_seconds / (mib << 20))))
                    expected = (args.rounds + 1) * window * (mib << 20) / rate
                    if expected > args.max_seconds:
                        cells.append(f"- ({expected:.0f} s)")
                        continue
                    mbit, err = run_wan(emu, args.scenario, mib, args.rounds, window, env,
                                        args.nice, timeout=max(900, 4 * expected))
                    if mbit is None:
                        print(err, file=sys.stderr)
                    picked = [l for l in err.splitlines() if "autotune:" in l]
                    if picked:
                        print(picked[0], flush=True)
                    ratio = f" ({mbit / ceiling:.2f}x)" if mbit and ceiling else ""
                    shown = f"{mbit:.0f}{ratio}" if mbit else "failed"
                    cells.append(shown + (f" w{window}" if window > 1 else ""))
                line = (f"| {case} | {p} | {ceiling:.0f} | " if ceiling else f"| {case} | {p} | - | ") \
                    + " | ".join(cells) + " |"
                print(line, flush=True)
                lines.append(line)
        finally:
            emu.stop()
    header = ("| case | streams | iperf3 | " + " | ".join(f"wan {m} MiB" for m in sizes) + " |\n"
              + "|" + "---|" * (len(sizes) + 3))
    table = header + "\n" + "\n".join(lines)
    print("\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
