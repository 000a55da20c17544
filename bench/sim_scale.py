#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""commx's collectives on a simulated cluster of 16 to 4,096 ranks, beside SMPI's Open MPI and
MPICH selections on the same platform (issue "A simulated cluster").

Runs bench_sim_collectives_simgrid (sim_collectives.cpp: one commx policy per run on
transport::simgrid) and bench_smpi_collectives (smpi_collectives.cpp: the same calls in MPI,
under smpirun with smpi/coll-selector ompi or mpich) for each rank count, side and collective,
on one platform (default: the shipped 4,096-host fat-tree), with compute skipped on both sides
and SimGrid's CM02 network model on both. A run is one simulated job; the simulation is
deterministic, so one run per cell is the figure (no rounds, no medians, no load to state: the
times are simulated). The wall time of each run is kept too: what a study costs.

    /usr/bin/python3 bench/sim_scale.py [--build-dir build/release] [--ranks 16 64 256 1024 4096]
        [--sides flat binomial ring hierarchical tuned ompi mpich] [--results results/bench/sim_scale]
        [--eager-bytes N]
    /usr/bin/python3 bench/sim_scale.py --report results/bench/sim_scale/cells.jsonl [--summary 256]

Writes cells.jsonl (a line per cell, appended as runs end, so a long study can be stopped and
resumed: cells already there are not run again), report.md (per collective, size and count:
every side's time, the best commx policy, tuned's choice and its ratio to the best policy and
to the better SMPI selection), with matplotlib (Debian's python3-matplotlib) scale.png, and with
--summary N summaryN.csv (the cells at N ranks, a row per collective and size: bench/README.md's
table, through bench/current_figures.py collect csv).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMX_SIDES = ["flat", "binomial", "ring", "hierarchical", "tuned"]
SMPI_SIDES = ["ompi", "mpich"]
COLLECTIVES = ["barrier", "bcast", "allreduce", "allgather", "alltoall"]
SIZES = [8, 1024, 65536, 1048576, 16777216]
CELL = re.compile(r"^cell (.*)$")
SIMGRID_REPORT = re.compile(r"simgrid: (\d+) ranks on .*: ([\d.]+) s simulated .* in ([\d.]+) s")


def parse_cell(line: str) -> dict | None:
    m = CELL.match(line.strip())
    if not m:
        return None
    cell = dict(item.split("=", 1) for item in m.group(1).split() if "=" in item)
    cell["bytes"] = int(cell["bytes"])
    cell["ranks"] = int(cell["ranks"])
    if "us" in cell:
        cell["us"] = float(cell["us"])
    return cell


def hostfile(directory: Path, platform: Path, ranks: int) -> Path:
    """SMPI's host file: rank i on the platform's i-th host, as transport::simgrid places them
    (natural order of names; the shipped platforms name hosts prefix-<i>)."""
    text = platform.read_text()
    m = re.search(r'prefix="([^"]*)"', text)
    prefix = m.group(1) if m else "node-"
    path = directory / f"hosts{ranks}"
    path.write_text("".join(f"{prefix}{i}\n" for i in range(ranks)))
    return path


def command(build: Path, side: str, ranks: int, collective: str, args, work: Path):
    common = ["--collectives", collective, "--sizes", ",".join(map(str, args.sizes)),
              "--calls", str(args.calls), "--memory-gib", str(args.memory_gib),
              "--flows", str(args.flows)]
    if side in COMMX_SIDES:
        env = dict(os.environ, COMMX_SIMGRID_RANKS=str(ranks),
                   COMMX_SIMGRID_PLATFORM=str(args.platform), COMMX_SIMGRID_COMPUTE="skip")
        if args.eager_bytes is not None:
            env["COMMX_SIMGRID_EAGER_BYTES"] = str(args.eager_bytes)
        env.pop("COMMX_SIMGRID_CONFIG", None)  # CM02, as the SMPI side is told
        return [str(build / "bench/bench_sim_collectives_simgrid"), side] + common, env
    hosts = hostfile(work, args.platform, ranks)
    cmd = ["smpirun", "-np", str(ranks), "-platform", str(args.platform), "-hostfile", str(hosts),
           f"--cfg=smpi/coll-selector:{side}", "--cfg=network/model:CM02",
           "--cfg=smpi/simulate-computation:no", "--cfg=smpi/display-timing:no",
           str(build / "bench/bench_smpi_collectives"), side] + common
    return cmd, dict(os.environ)


def run_study(args) -> None:
    args.results.mkdir(parents=True, exist_ok=True)
    cells_path = args.results / "cells.jsonl"
    done = set()
    if cells_path.exists():
        for line in cells_path.read_text().splitlines():
            c = json.loads(line)
            done.add((c["side"], c["ranks"], c["collective"]))
    for ranks in args.ranks:
        for collective in args.collectives:
            for side in args.sides:
                if (side, ranks, collective) in done:
                    continue
                cmd, env = command(args.build_dir, side, ranks, collective, args, args.results)
                started = time.monotonic()
                # A session of its own: smpirun is a shell script whose simulator (smpimain)
                # would outlive a timeout that ends the script alone.
                with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      start_new_session=True) as run:
                    try:
                        stdout, stderr = run.communicate(timeout=args.timeout)
                        lines, failed = stdout.splitlines(), run.returncode != 0
                        why = stderr.strip().splitlines()[-1:] if failed else []
                    except subprocess.TimeoutExpired:
                        os.killpg(run.pid, signal.SIGKILL)
                        stdout, _ = run.communicate()
                        lines, failed, why = stdout.splitlines(), True, [f"timeout {args.timeout} s"]
                wall = time.monotonic() - started
                cells = [c for c in map(parse_cell, lines) if c]
                seen = {c["bytes"] for c in cells}
                sizes = [0] if collective == "barrier" else args.sizes
                for size in sizes:  # what a failed or stopped run did not reach
                    if size not in seen:
                        cells.append({"side": side, "collective": collective, "bytes": size,
                                      "ranks": ranks,
                                      "skipped": " ".join(why).replace(" ", "_") or "no_output"})
                with cells_path.open("a") as f:
                    for c in cells:
                        c["side"] = side
                        c["wall_s"] = round(wall, 2)
                        f.write(json.dumps(c) + "\n")
                print(f"sim_scale: {side} {collective} at {ranks}: {wall:.1f} s wall"
                      f"{' (failed: ' + ' '.join(why) + ')' if failed else ''}", file=sys.stderr)


def human(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def report(cells_path: Path) -> str:
    cells = [json.loads(line) for line in cells_path.read_text().splitlines()]
    by = {(c["side"], c["collective"], c["bytes"], c["ranks"]): c for c in cells}
    sides = [s for s in COMMX_SIDES + SMPI_SIDES if any(c["side"] == s for c in cells)]
    keys = sorted({(c["collective"], c["bytes"], c["ranks"]) for c in cells},
                  key=lambda k: (COLLECTIVES.index(k[0]), k[1], k[2]))
    out = ["Simulated microseconds per call (sim_study.hpp's span); `-` not run (memory or flow "
           "budget, or the run did not end: see cells.jsonl). best: the fastest commx policy. "
           "tuned/best and tuned/SMPI: tuned's time over the best policy's and over the faster "
           "of SMPI's ompi and mpich selections.", ""]
    current = None
    wins = losses = 0
    for collective, size, ranks in keys:
        if collective != current:
            current = collective
            out += ["", f"### {collective}", "",
                    "| size | ranks | " + " | ".join(sides) +
                    " | best | tuned chose | tuned/best | tuned/SMPI |",
                    "|---|---:|" + "---:|" * len(sides) + "---|---|---:|---:|"]
        row = [human(size) if collective != "barrier" else "-", str(ranks)]
        times = {}
        for s in sides:
            c = by.get((s, collective, size, ranks))
            if c and "us" in c:
                times[s] = c["us"]
                row.append(f"{c['us']:.1f}")
            else:
                row.append("-")
        best, smpi = best_and_smpi(times)
        tuned = by.get(("tuned", collective, size, ranks), {})
        ratio_best = times["tuned"] / times[best] if best and "tuned" in times else math.nan
        ratio_smpi = times["tuned"] / smpi if smpi and "tuned" in times else math.nan
        if not math.isnan(ratio_smpi) and ranks >= 256:
            wins += ratio_smpi <= 1.0
            losses += ratio_smpi > 1.0
        row += [best or "-", tuned.get("algorithm", "-"),
                "-" if math.isnan(ratio_best) else f"{ratio_best:.2f}",
                "-" if math.isnan(ratio_smpi) else f"{ratio_smpi:.2f}"]
        out.append("| " + " | ".join(row) + " |")
    walls = {}
    for c in cells:
        walls[(c["side"], c["ranks"], c["collective"])] = c.get("wall_s", 0)
    out += ["", f"At 256 ranks and more, tuned is at or below the better SMPI selection in {wins} "
            f"cells and above it in {losses}.", "", "Wall seconds per run (one collective, every "
            "size), by side and rank count:", "",
            "| side | " + " | ".join(str(r) for r in sorted({k[1] for k in walls})) + " |",
            "|---|" + "---:|" * len({k[1] for k in walls})]
    for s in sides:
        row = [s]
        for r in sorted({k[1] for k in walls}):
            total = sum(w for (side, ranks, _), w in walls.items() if side == s and ranks == r)
            row.append(f"{total:.0f}")
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def best_and_smpi(times: dict) -> tuple[str | None, float | None]:
    """Of one cell's times by side: the fastest commx policy (tuned aside) and the faster of
    SMPI's selections (None where a side is missing)."""
    policies = {s: t for s, t in times.items() if s in COMMX_SIDES and s != "tuned"}
    smpi = [times[s] for s in SMPI_SIDES if s in times]
    return (min(policies, key=policies.get) if policies else None), (min(smpi) if smpi else None)


def ratio_text(ratio: float) -> str:
    """tuned over SMPI to three places, said in words where it is above 1 (a table that rounds
    numbers to three digits would show 1.003 as 1)."""
    return f"{ratio:.3f} (above)" if ratio > 1 else f"{ratio:.3f}"


def summary_csv(cells_path: Path, ranks: int, path: Path) -> None:
    """One row per collective and size at `ranks`: the best commx policy, tuned and its choice,
    SMPI's two selections and tuned over the faster of them (bench/README.md's table, through
    bench/current_figures.py collect csv)."""
    cells = [json.loads(line) for line in cells_path.read_text().splitlines()]
    by = {(c["side"], c["collective"], c["bytes"]): c for c in cells
          if c["ranks"] == ranks and "us" in c}
    keys = sorted({(c["collective"], c["bytes"]) for c in cells if c["ranks"] == ranks},
                  key=lambda k: (COLLECTIVES.index(k[0]), k[1]))
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["collective", "size", "best policy", "tuned (its choice)", "SMPI ompi",
                      "SMPI mpich", "tuned/SMPI"])
        for collective, size in keys:
            times = {s: by[(s, collective, size)]["us"] for s in COMMX_SIDES + SMPI_SIDES
                     if (s, collective, size) in by}
            tuned = by.get(("tuned", collective, size))
            best, smpi = best_and_smpi(times)
            if not tuned or smpi is None:
                continue
            out.writerow([collective, human(size) if collective != "barrier" else "-",
                          f"{best}: {times[best]:.1f}" if best else "-",
                          f"{tuned['us']:.1f} ({tuned.get('algorithm', '?')})",
                          *(f"{times[s]:.1f}" if s in times else "-" for s in SMPI_SIDES),
                          ratio_text(tuned["us"] / smpi)])
    print(f"sim_scale: wrote {path}", file=sys.stderr)


def plot(cells_path: Path, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sim_scale: no matplotlib, no plot", file=sys.stderr)
        return
    cells = [json.loads(line) for line in cells_path.read_text().splitlines()]
    panels = [("barrier", 0), ("bcast", 8), ("bcast", 1048576), ("allreduce", 8),
              ("allreduce", 1048576), ("allgather", 1024), ("alltoall", 1024)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.5))
    for ax, (collective, size) in zip(axes, panels):
        for side in COMMX_SIDES + SMPI_SIDES:
            pts = sorted((c["ranks"], c["us"]) for c in cells if c["side"] == side
                         and c["collective"] == collective and c["bytes"] == size and "us" in c)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=side,
                        linestyle="--" if side in SMPI_SIDES else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("simulated ranks")
        ax.set_title(f"{collective} {human(size) if collective != 'barrier' else ''} (us)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"sim_scale: wrote {path}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build/release")
    ap.add_argument("--platform", type=Path, default=ROOT / "platforms/simgrid/fat-tree.xml")
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    ap.add_argument("--sides", nargs="+", default=COMMX_SIDES + SMPI_SIDES,
                    choices=COMMX_SIDES + SMPI_SIDES)
    ap.add_argument("--collectives", nargs="+", default=COLLECTIVES, choices=COLLECTIVES)
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--memory-gib", type=float, default=4.0)
    ap.add_argument("--flows", type=float, default=65536)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--eager-bytes", type=int,
                    help="commx's eager size (COMMX_SIMGRID_EAGER_BYTES; default 0: every send "
                         "waits for its transfer, which gives SMPI's times for the same algorithms)")
    ap.add_argument("--results", type=Path, default=ROOT / "results/bench/sim_scale")
    ap.add_argument("--report", type=Path, help="only report (and plot) these cells")
    ap.add_argument("--summary", type=int, metavar="RANKS",
                    help="also write summary<RANKS>.csv: the cells at RANKS, one row per "
                         "collective and size (bench/README.md's table)")
    args = ap.parse_args()
    args.platform = args.platform.resolve()
    cells_path = args.report or args.results / "cells.jsonl"
    if not args.report:
        run_study(args)
    text = report(cells_path)
    (cells_path.parent / "report.md").write_text(text)
    print(text)
    plot(cells_path, cells_path.parent / "scale.png")
    if args.summary:
        summary_csv(cells_path, args.summary, cells_path.parent / f"summary{args.summary}.csv")


if __name__ == "__main__":
    main()
