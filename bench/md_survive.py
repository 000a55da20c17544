#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What md_replicated --survive costs, and a run that loses a rank, in interleaved rounds.

    python3 bench/md_survive.py [--build-dir build/release] [--rounds 5] [--stack shm]
                                [--ranks 4] [--kill-step 50] [--steps 100]

Each round times a cache line's crossing (bench_cache_line), then runs md_replicated_faulty_
<stack> (32000 atoms) four ways, the order turning each round: without --survive (double sums),
with it (fixed-point sums, two steps kept), with it and rank 2 killed by its fault plan at
the collective send that falls in --kill-step (sends per step counted once, by a kill that
fires late),
and with it at one rank fewer from the start. Prints the medians over rounds of each way's
ms per step and wall time, the ratios survive / plain and killed / fewer (issue 50: the whole
run's time with a rank killed at step 50 of 100 against a run with the survivors' count from
the start), the step each kill fell in and its recovery time, and whether every killed run
ended with the fingerprint of the runs without a loss.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from launching import cache_line_ns  # noqa: E402

RESULT = re.compile(r"time_per_step_ms=([0-9.]+)")
PRINT = re.compile(r"final state fingerprint: ([0-9a-f]+)")
RECOVERED = re.compile(r"recovered: lost rank 2 in step (\d+); back to step (\d+); .*; ([0-9.]+) ms")


def run(args, ranks: int, survive: bool, faults: str = "") -> tuple[str, float]:
    program = args.build_dir / f"examples/md_replicated/md_replicated_faulty_{args.stack}"
    command = [str(args.build_dir / "tools/commxrun/commxrun"), "-n", str(ranks), "--keep-going",
               "--timeout", "300"]
    if args.stack == "shm_tcp":
        command += ["--nodes", "2"]
    command += [str(program), "--steps", str(args.steps)] + (["--survive"] if survive else [])
    env = dict(os.environ, COMMX_FAULTS=faults)
    start = time.monotonic()
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=330).stdout
    return out, time.monotonic() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--stack", default="shm")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--kill-step", type=int, default=50)
    args = p.parse_args()
    n = args.ranks
    per_step: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    kills, recoveries, modes, loads = [], [], [], []
    fingerprints: set[str] = set()
    sends_per_step = sends_of(args, n)
    for r in range(args.rounds):
        modes.append(cache_line_ns(args.build_dir) or float("nan"))
        loads.append(os.getloadavg()[0])
        ways = ["plain", "survive", "killed", "fewer"]
        ways = ways[r % 4:] + ways[:r % 4]
        for way in ways:
            if way == "killed":
                out, _ = run(args, n, True, f"kill@2:coll={args.kill_step * sends_per_step}")
            else:
                out, seconds = run(args, n - 1 if way == "fewer" else n, way != "plain")
            m = RESULT.search(out)
            f = PRINT.search(out)
            if not m or not f:
                print(f"round {r + 1} {way}: no result: {out[-400:]}")
                continue
            if way != "plain":
                fingerprints.add(f.group(1))
            per_step.setdefault(way, []).append(float(m.group(1)))
            if way == "killed":
                k = RECOVERED.search(out)
                if k:
                    kills.append(int(k.group(1)))
                    recoveries.append(float(k.group(3)))
            else:
                wall.setdefault(way, []).append(seconds)
        print(f"round {r + 1}: cache line {modes[-1]:.0f} ns, load {loads[-1]:.1f}", flush=True)
    med = {w: statistics.median(v) for w, v in per_step.items()}
    print(f"\nmd_replicated_faulty_{args.stack}, 32000 atoms, {args.steps} steps, {n} ranks; "
          f"medians of {args.rounds} rounds; cache line {min(modes):.0f}-{max(modes):.0f} ns; "
          f"load {min(loads):.1f}-{max(loads):.1f} before the rounds")
    for way in ("plain", "survive", "killed", "fewer"):
        if way in med:
            print(f"  {way:<8} {med[way]:8.2f} ms per step")
    if "plain" in med and "survive" in med:
        print(f"  survive / plain: {med['survive'] / med['plain']:.3f}")
    if "killed" in med and "fewer" in med:
        print(f"  killed / fewer (loop per step, the steps done again included): "
              f"{med['killed'] / med['fewer']:.3f}")
    if kills:
        print(f"  kills fell in steps {sorted(kills)}; recovery {statistics.median(recoveries):.1f} "
              f"ms (median)")
    print(f"  fingerprints of the --survive runs: {sorted(fingerprints)} "
          + ("(all the same)" if len(fingerprints) == 1 else "(DIFFERENT)"))
    return 0 if len(fingerprints) == 1 else 1


def sends_of(args, n: int) -> int:
    """Rank 2's collective sends per step (the fault plan counts sends, not steps): a kill at
    send K that fires in step s tells K / s."""
    for guess in (16, 8, 4, 2, 1):  # the first that fires, about halfway
        probe = guess * args.steps // 2
        out, _ = run(args, n, True, f"kill@2:coll={probe}")
        if k := RECOVERED.search(out):
            return max(1, round(probe / int(k.group(1))))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
