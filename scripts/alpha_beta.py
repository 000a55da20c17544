#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fits each stack's point-to-point cost to seed 000's model, C(n) = alpha + n * beta: the
latency alpha and the time per byte beta (1 / beta: the asymptotic bandwidth), from the
half round trips bench_pingpong_<stack> measures at 0 B to 4 MiB on 2 ranks.

The fit weighs every size alike in relative terms (least squares of (C(n) - t) / t), since the
sizes span six orders of magnitude and a plain fit would see only the largest. Prints one line
per stack (alpha, beta, bandwidth, the worst relative misfit), writes them as CSV and, when
matplotlib is there, a log-log plot of the measured points and the fitted lines.

    python3 scripts/alpha_beta.py [--build-dir build/release] [--stacks shm tcp ...]

Stacks are launched as the main job launches them (scripts/md_compare.py): inproc on threads,
mpi under mpirun, the others under commxrun (the layered stacks on two simulated nodes).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launching import RANK_PREFIX, STACKS, launched, program_for  # noqa: E402  (launch rules)

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class NotACost(ValueError):
    """A fitted line whose latency or time per byte is not positive."""


def fit(points: dict[int, float]) -> tuple[float, float, float]:
    """(alpha s, beta s/byte, worst relative misfit) of C(n) = alpha + n * beta through
    `points` (bytes -> seconds), minimising the sum of ((C(n) - t) / t)^2; ValueError when the
    line is not a cost (alpha or beta not positive)."""
    if len({n for n in points}) < 2:
        raise ValueError("a fit needs at least two message sizes")
    if any(t <= 0 for t in points.values()):
        raise ValueError("times must be positive")
    # Weighted linear least squares, weight 1 / t^2: the 2x2 normal equations.
    s0 = s1 = s2 = r0 = r1 = 0.0
    for n, t in points.items():
        w = 1.0 / (t * t)
        s0 += w
        s1 += w * n
        s2 += w * n * n
        r0 += w * t
        r1 += w * n * t
    det = s0 * s2 - s1 * s1
    if det <= 0:
        raise ValueError("the sizes do not determine a line")
    alpha = (r0 * s2 - r1 * s1) / det
    beta = (s0 * r1 - s1 * r0) / det
    if alpha <= 0 or beta <= 0:
        raise NotACost(f"alpha {alpha:.3g} s, beta {beta:.3g} s/B: not a cost")
    worst = max(abs(alpha + beta * n - t) / t for n, t in points.items())
    return alpha, beta, worst


def measure(stack: str, build_dir: Path, repetitions: int, min_time: float,
            timeout: float) -> dict[int, float]:
    """Half round trip per size (bytes -> s, the median of the repetitions) of
    bench_pingpong_<stack> on 2 ranks."""
    program = build_dir / "bench" / f"bench_pingpong_{stack}"
    if not program.is_file():
        raise FileNotFoundError(f"{program} is not built (cmake --build --preset release "
                                f"--target bench_pingpong_all)")
    commxrun = build_dir / "tools" / "commxrun" / "commxrun"
    command, env = launched(stack, 2, [
        # Named by the stack's own name ("shm+tcp"), the only one in this program.
        str(program), "--benchmark_filter=^pingpong/commx-",
        "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
        "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={min_time}"],
        timeout, commxrun)
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=timeout + 30)
    if done.returncode != 0:
        raise RuntimeError(f"{stack}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    # Rank 0 prints the report; a launcher prefixes each line with "[0] ".
    report = "\n".join(RANK_PREFIX.sub("", line) for line in done.stdout.splitlines())
    medians, single = {}, {}  # one repetition reports the run itself, no aggregates
    for b in json.loads(report[report.index("{"):])["benchmarks"]:
        size = int(b["run_name"].split("/")[2])
        seconds = b["real_time"] * UNIT[b["time_unit"]] / 2
        if b.get("aggregate_name") == "median":
            medians[size] = seconds
        elif b.get("run_type") == "iteration":
            single[size] = seconds
    return medians or single


# How many times a stack is measured while its fit comes out as no cost.
FIT_ATTEMPTS = 3


def measured_fit(stack: str, args) -> tuple[dict[int, float], tuple[float, float, float]]:
    """`stack`'s points and fit. A noisy spell of a shared machine can bury the bytes' cost
    under its latencies (a line that is flat or falls): then it is measured again, at most
    FIT_ATTEMPTS times in all, and the last ValueError stands."""
    for attempt in range(1, FIT_ATTEMPTS + 1):
        points = measure(stack, args.build_dir, args.repetitions, args.min_time, args.timeout)
        try:
            return points, fit(points)
        except NotACost as e:
            if attempt == FIT_ATTEMPTS:
                raise ValueError(f"{e} in each of {attempt} measurements") from e
            print(f"alpha_beta: {stack}: {e}; measuring again", file=sys.stderr)
    raise AssertionError("unreachable")


def plot(results: dict[str, tuple[dict[int, float], float, float]], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    for stack, (points, alpha, beta) in results.items():
        sizes = sorted(n for n in points if n > 0)
        line = ax.plot(sizes, [points[n] * 1e6 for n in sizes], "o", label=stack)[0]
        ax.plot(sizes, [(alpha + beta * n) * 1e6 for n in sizes], "-", color=line.get_color(),
                label=f"{stack}: {alpha * 1e6:.2f} us + n / {1e-9 / beta:.2f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message bytes")
    ax.set_ylabel("half round trip (us)")
    ax.set_title("C(n) = alpha + n beta per stack (2 ranks)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--stacks", nargs="+", choices=STACKS,
                   help="default: every bench_pingpong_<stack> built")
    p.add_argument("--results", type=Path, default=Path("results/alpha_beta"))
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.1, help="seconds per size")
    p.add_argument("--timeout", type=float, default=300, help="seconds per stack")
    args = p.parse_args()
    stacks = args.stacks or sorted(
        path.name.removeprefix("bench_pingpong_")
        for path in (args.build_dir / "bench").glob("bench_pingpong_*")
        if path.is_file() and path.name != "bench_pingpong_all")
    if not stacks:
        print(f"alpha_beta: no bench_pingpong_<stack> in {args.build_dir / 'bench'}",
              file=sys.stderr)
        return 2
    for stack in args.stacks or []:
        program_for(stack, args.build_dir / "bench", "bench_pingpong")  # a clear error if not built
    args.results.mkdir(parents=True, exist_ok=True)
    results = {}
    failed = 0
    print(f"{'stack':<12} {'alpha (us)':>11} {'beta (ns/B)':>12} {'1/beta (GB/s)':>14} "
          f"{'worst misfit':>13}")
    for stack in stacks:
        try:
            points, (alpha, beta, worst) = measured_fit(stack, args)
        except (OSError, RuntimeError, ValueError, KeyError, IndexError,
                subprocess.TimeoutExpired) as e:
            print(f"{stack:<12} failed: {e}")
            failed += 1
            continue
        results[stack] = (points, alpha, beta)
        print(f"{stack:<12} {alpha * 1e6:>11.3f} {beta * 1e9:>12.4f} {1e-9 / beta:>14.3f} "
              f"{worst * 100:>12.0f}%")
    with open(args.results / "alpha_beta.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["stack", "alpha_s", "beta_s_per_byte", "bandwidth_bytes_per_s"])
        for stack, (_, alpha, beta) in results.items():
            out.writerow([stack, f"{alpha:.6e}", f"{beta:.6e}", f"{1 / beta:.6e}"])
    print(f"table: {args.results / 'alpha_beta.csv'}")
    if results and plot(results, args.results / "alpha_beta.png"):
        print(f"plot: {args.results / 'alpha_beta.png'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
