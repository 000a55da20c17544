#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""agree against a 4-byte allreduce (binomial and tuned), side by side, in interleaved rounds.

    python3 bench/agree_compare.py [--build-dir build/release] [--rounds 5] [--ranks 2 4 8]
                                   [--stacks shm tcp] [--out results/bench/agree.csv]
                                   [--before OTHER_BUILD_DIR] [--by-mode]
                                   [--wanemu build/release/tools/wanemu/wanemu [--link-us 200]]

Each round runs bench_agree_<stack> under commxrun at every rank count, after timing a cache
line's crossing (bench_cache_line: ~40 ns one die, ~200-250 ns two); a run's figure is the
median of its 3 repetitions (the first benchmark a process times runs cold: agree_bench.cpp).
The CSV holds, per stack and rank count, the median over rounds of each figure and of each
round's ratio, the rounds by the VM's mode and the load average seen; with --by-mode, a row per
mode the rounds met (a point's mode is its cache line's, timed just before it ran). The goal
(issue 50): agree at most 2x the allreduce. Beside it, the allreduce followed by a barrier: what
a uniform agreement must do at least (learn the outcome, then hold every rank until all hold
it). With --before, each run is paired with one of the other build's (which goes first
alternates), and the CSV adds agree's median time there and the median of the pairs' ratios.
With --wanemu (root), each round also runs tcp at 2 ranks across wanemu's emulated link between
two network namespaces (--link-us each way, no rate limit), stack "tcp-link": where the link's
latency outweighs the kernel's work per message, as between real hosts.
"""

import argparse
import csv
import os
import re
import secrets
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from launching import cache_line_ns  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "wan"))
from iperf_ceiling import ADDR_A, ADDR_B, Emulator, run_all  # noqa: E402

LINE = re.compile(
    r"^(?:\[0\] )?(Agree|Allreduce)/commx-[a-z_]+(-[a-z+]+)?/np\d+/4/\S+_median\s+([0-9.]+) us")
REPETITIONS = 3  # a run's figure is their median (the module's comment)
BENCH_ARGS = [f"--benchmark_repetitions={REPETITIONS}", "--benchmark_report_aggregates_only=true"]
LINK_STACK = "tcp-link"  # tcp at 2 ranks across wanemu's link (--wanemu)


def one_run(build: Path, stack: str, ranks: int, launcher: Path, emu=None) -> dict[str, float]:
    if stack == LINK_STACK:
        out = link_run(build, emu)
    else:
        out = subprocess.run([str(launcher / "tools/commxrun/commxrun"), "-n", str(ranks),
                              "--timeout", "300", str(build / f"bench/bench_agree_{stack}")] +
                             BENCH_ARGS, capture_output=True, text=True, timeout=330).stdout
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            found["agree" if m.group(1) == "Agree" else m.group(2)[1:]] = float(m.group(3))
    if not {"agree", "binomial", "tuned"} <= set(found):
        raise SystemExit(f"bench_agree_{stack} at {ranks} ranks printed:\n{out}")
    return found


def link_run(build: Path, emu) -> str:
    """Rank 0's output of bench_agree_tcp at 2 ranks, one in each of wanemu's namespaces."""
    token = secrets.token_hex(32)
    port = 20000 + secrets.randbelow(10000)
    commands = [["ip", "netns", "exec", ns, "env", f"COMMX_RANK={rank}", "COMMX_SIZE=2",
                 f"COMMX_ROOT={ADDR_A}:{port}", f"COMMX_TOKEN={token}", f"COMMX_ADDR={addr}",
                 f"COMMX_NODE=n{rank}", "COMMX_LOCAL_SIZE=1", "COMMX_TIMEOUT=120",
                 str(build / "bench/bench_agree_tcp")] + BENCH_ARGS
                for rank, (ns, addr) in enumerate([(emu.ns_a, ADDR_A), (emu.ns_b, ADDR_B)])]
    return run_all(commands, 600)[0][0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--stacks", nargs="+", default=["shm", "tcp"])
    p.add_argument("--out", type=Path, default=Path("results/bench/agree.csv"))
    p.add_argument("--before", type=Path, help="another build of bench_agree_<stack>, paired")
    p.add_argument("--by-mode", action="store_true", help="a row per VM mode (one die, two dies)")
    p.add_argument("--wanemu", type=Path, help="also tcp at 2 ranks across this wanemu's link")
    p.add_argument("--link-us", type=float, default=200, help="the link's one-way delay, us")
    args = p.parse_args()
    emu = None
    if args.wanemu:
        emu = Emulator(str(args.wanemu), f"commx-agree{os.getpid()}-", args.link_us / 1000, 0, 0,
                       1, [], -10)
    try:
        compare(args, emu)
    finally:
        if emu:
            emu.stop()


def compare(args: argparse.Namespace, emu) -> None:
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    before: dict[tuple[str, int], list[dict[str, float]]] = {}
    modes = {"one die": 0, "two dies": 0}
    mode_of: dict[tuple[str, int], list[str]] = {}  # each round's mode, per point
    loads = []
    for round_ in range(args.rounds):
        for stack in args.stacks + ([LINK_STACK] if emu else []):
            for ranks in [2] if stack == LINK_STACK else args.ranks:
                line = cache_line_ns(args.build_dir) or float("nan")
                mode = "one die" if line < 120 else "two dies"
                modes[mode] += 1
                mode_of.setdefault((stack, ranks), []).append(mode)
                loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
                builds = [(runs, args.build_dir)]
                if args.before:
                    builds.insert(round_ % 2, (before, args.before))
                for into, build in builds:
                    into.setdefault((stack, ranks), []).append(
                        one_run(build, stack, ranks, args.build_dir, emu))
                    print(f"round {round_ + 1} {stack} np{ranks} {build}: "
                          f"{into[(stack, ranks)][-1]} (a cache line {line:.0f} ns)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.writer(f)
        # A build from before the allreduce-and-barrier row ran none: the columns say "-".
        w.writerow(["stack", "ranks"] + (["mode", "rounds"] if args.by_mode else []) + ["agree us", "allreduce binomial us", "allreduce tuned us",
                    "allreduce tuned + barrier us", "agree / binomial", "agree / tuned",
                    "agree / (tuned + barrier)"] +
                   (["agree before us", "agree after / before"] if args.before else []))
        groups = []  # (stack, ranks, mode or None, the rounds' indices)
        for (stack, ranks), all_rounds in runs.items():
            kinds = sorted(set(mode_of[(stack, ranks)])) if args.by_mode else [None]
            for kind in kinds:
                groups.append((stack, ranks, kind,
                               [i for i in range(len(all_rounds))
                                if kind is None or mode_of[(stack, ranks)][i] == kind]))
        for stack, ranks, kind, picked in groups:
            rs = [runs[(stack, ranks)][i] for i in picked]
            med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
            ratio = lambda key: statistics.median(r["agree"] / r[key] for r in rs)  # noqa: E731
            both = all("tuned+barrier" in r for r in rs)
            row = [stack, ranks] + ([kind, len(rs)] if args.by_mode else []) + [
                   f"{med('agree'):.2f}", f"{med('binomial'):.2f}",
                   f"{med('tuned'):.2f}", f"{med('tuned+barrier'):.2f}" if both else "-",
                   f"{ratio('binomial'):.2f}", f"{ratio('tuned'):.2f}",
                   f"{ratio('tuned+barrier'):.2f}" if both else "-"]
            if args.before:
                bs = [before[(stack, ranks)][i] for i in picked]
                row += [f"{statistics.median(b['agree'] for b in bs):.2f}",
                        f"{statistics.median(r['agree'] / b['agree'] for r, b in zip(rs, bs)):.2f}"]
            w.writerow(row)
    print(f"agree_compare: runs by the VM's mode: {modes}; load average {min(loads):.2f}-"
          f"{max(loads):.2f}; {args.out}")


if __name__ == "__main__":
    main()
