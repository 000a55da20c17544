#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nbody_wide on two sites joined by a wide link against the same problem on one site.

Issue 16's measurement: two sites of 2 ranks, each its own job (shm inside), the leaders joined
over wanemu's emulated link (25 ms each way: 50 ms RTT, 1 Gbit/s) through a commx-relay per site
(examples/nbody_wide/two_sites.py), against one job of 4 ranks on one site (commxrun, shm), the
same particles (--lattice N), the same steps. Interleaved rounds, the order alternating; per run
the mean step over steps 1..S (step 0 holds the start-up); medians over the rounds, and the
ratios. Also the wide-area fraction of the two-site step (the ranks' mean time in wide-area
communication over their mean step). Needs root (network namespaces).

  sudo bench/nbody_sites.py --build build/release [--lattice 64] [--steps 5] [--rounds 5]
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def result_of(output):
    for line in output.splitlines():
        if "nbody result:" in line:
            return dict(f.split("=", 1) for f in line.split("nbody result:", 1)[1].split())
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=ROOT / "build" / "release")
    p.add_argument("--lattice", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--delay-ms", type=float, default=25.0)
    p.add_argument("--rate-mbit", type=float, default=1000.0)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("nbody_sites.py: needs root (network namespaces)", file=sys.stderr)
        return 77
    problem = ["--lattice", str(args.lattice), "--steps", str(args.steps)]
    commands = {
        "one site (4 ranks, shm)": [str(args.build / "tools" / "commxrun" / "commxrun"), "-n",
                                    "4", str(args.build / "examples" / "nbody_wide" /
                                             "nbody_wide_shm")] + problem,
        "two sites (2+2, shm, 50 ms RTT, relays)": [
            sys.executable, str(ROOT / "examples" / "nbody_wide" / "two_sites.py"), "--build",
            str(args.build), "--stack", "shm", "--delay-ms", str(args.delay_ms), "--rate-mbit",
            str(args.rate_mbit), "--timeout", "1200", "--"] + problem,
    }
    names = list(commands)
    results = {name: [] for name in names}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            proc = subprocess.run(commands[name], capture_output=True, text=True, timeout=1500)
            fields = result_of(proc.stdout)
            if proc.returncode != 0 or fields is None:
                print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
                print(f"nbody_sites.py: {name} failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            results[name].append(fields)
            print(f"round {r + 1} {name}: step {float(fields['step_ms']):.1f} ms, wide "
                  f"{100 * float(fields['wide_fraction']):.1f}%", flush=True)
    load_after = os.getloadavg()

    def median(name, key):
        return statistics.median(float(f[key]) for f in results[name])

    one, two = names
    particles = results[one][0]["particles"]
    print(f"\nnbody_wide, {particles} particles (lattice {args.lattice}^3), steps 1-{args.steps}, "
          f"medians of {args.rounds} interleaved rounds; load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"{'run':<42} {'step ms':>8} {'compute':>8} {'local':>7} {'wide':>7} {'wide %':>7}")
    for name in names:
        print(f"{name:<42} {median(name, 'step_ms'):>8.1f} {median(name, 'compute_ms'):>8.1f} "
              f"{median(name, 'local_ms'):>7.1f} {median(name, 'wide_ms'):>7.1f} "
              f"{100 * median(name, 'wide_fraction'):>7.1f}")
    ratio = median(two, "step_ms") / median(one, "step_ms")
    fraction = median(two, "wide_fraction")
    print(f"two sites / one site: {ratio:.2f}x the step time (goal <= 1.3x); wide-area "
          f"fraction {100 * fraction:.1f}% (goal <= 12.5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
