#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""From a SIGKILL to the first collective on the shrunk communicator, in interleaved rounds.

    python3 bench/recovery_time.py [--build-dir build/release] [--rounds 5] [--ranks 8 64]
                                   [--stacks shm tcp]

Each round times a cache line's crossing (bench_cache_line: ~40 ns one die, ~200-250 ns two),
then runs bench_recovery_time_<stack> under commxrun --keep-going at every rank count: the
last rank kills itself at its 100th barrier, the survivors revoke, shrink and run a barrier.
Prints, per stack and rank count, the medians over rounds of the time from the kill to the
loss seen, to the shrink's return and to the first collective's end, and the rounds' modes.
The goal (issue 50): under 50 ms at 8 ranks.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from launching import cache_line_ns  # noqa: E402

LINE = re.compile(r"recovery kill_to_detect_ms=([0-9.]+) kill_to_shrunk_ms=([0-9.]+) "
                  r"kill_to_collective_ms=([0-9.]+) survivors=(\d+)")


def one_run(build: Path, stack: str, ranks: int, file: str) -> tuple[float, float, float] | None:
    done = subprocess.run([str(build / "tools/commxrun/commxrun"), "-n", str(ranks),
                           "--keep-going", "--timeout", "120",
                           str(build / f"bench/bench_recovery_time_{stack}"), file],
                          capture_output=True, text=True, timeout=150)
    m = LINE.search(done.stdout)
    if not m or int(m.group(4)) != ranks - 1:
        print(f"  {stack} {ranks}: no figure: {done.stdout[-300:]} {done.stderr[-300:]}")
        return None
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64])
    p.add_argument("--stacks", nargs="+", default=["shm", "tcp"])
    args = p.parse_args()
    figures: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    modes = []
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        file = os.path.join(folder, "killed_at")
        for r in range(args.rounds):
            line = cache_line_ns(args.build_dir) or float("nan")
            modes.append("one die" if line < 120 else "two dies")
            for ranks in args.ranks:
                for stack in args.stacks:
                    got = one_run(args.build_dir, stack, ranks, file)
                    if got:
                        figures.setdefault((stack, ranks), []).append(got)
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}: cache line {line:.0f} ns ({modes[-1]})", flush=True)
    print(f"\nms after the SIGKILL, medians of {args.rounds} rounds ({', '.join(modes)}); "
          f"load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'stack':<6} {'ranks':>5} {'seen':>8} {'shrunk':>8} {'collective':>11} {'runs':>5}")
    for (stack, ranks), runs in sorted(figures.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = [statistics.median(v[i] for v in runs) for i in range(3)]
        print(f"{stack:<6} {ranks:>5} {med[0]:>8.1f} {med[1]:>8.1f} {med[2]:>11.1f} "
              f"{len(runs):>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
