#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The main job's driver: runs md_replicated on every stack that was built, with every
collectives policy, at 1, 2 and 4 ranks, and prints one comparison table; writes it as CSV and
two PNG charts under results/md/ (comparison.png: time per step by stack and rank count against
the MPI baseline, with the default policy; policies.png: every policy on every stack, as a ratio
to the baseline).

Programs are discovered from the build tree: md_replicated_<stack>, which holds every policy
(--list-collectives names them, --collectives picks one), or md_replicated_<stack>_<policy>
from a build of one policy each; so a stack that lands later joins the table with no edit here.
How a stack is launched (scripts/launching.py):
  inproc           COMMX_INPROC_RANKS=N ./md_replicated_inproc --collectives P
  mpi              mpirun -np N --oversubscribe ./md_replicated_mpi --collectives P
  mpi_wan          two mpiruns of N/2 ranks, one per site (tests/transport/sites_by_launch.sh)
  anything else    commxrun -n N --timeout T ./md_replicated_<stack> --collectives P

The baseline is md_replicated_mpi_raw, the same kernel written directly against MPI
(MPI_Allreduce, no commx), launched as the mpi stack and listed as policy "raw": every row
gives its time per step as a ratio to the baseline's at the same rank count ("vs MPI"), in the
table, the CSV and the chart.

Every run has a timeout; a run that fails, times out or prints no RESULT line shows up in the
table as failed. Runs go in order of importance (the baseline, every stack with the default
policy, then the other policies). By default every row runs; with --budget, runs that would
start after the budget is spent are listed as skipped.

For the 2-rank runs it also prints the communication fraction that the stack's own point-to-
point latency and bandwidth predict for the force sum (one allreduce of 3N+2 doubles per step),
next to the measured one: see examples/md_replicated/README.md, "Communication model".
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alpha_beta import fit, measure  # noqa: E402  (seed 000's model, fitted per stack)
from launching import RANK_PREFIX, STACKS, cache_line_ns, launched, vm_mode  # noqa: E402

BASELINE_POLICY = "raw"  # md_replicated_mpi_raw: no commx at all
POLICIES = [BASELINE_POLICY, "flat", "binomial", "ring", "hierarchical", "tuned", "native"]
DEFAULT_POLICY = "tuned"
VARIANT = re.compile(
    r"^md_replicated_(?P<stack>[a-z0-9_]+?)_(?P<policy>" + "|".join(POLICIES) + r")$")
EVERY_POLICY = re.compile(r"^md_replicated_(?P<stack>[a-z0-9_]+)$")


@dataclass
class Run:
    stack: str
    policy: str
    ranks: int
    binary: Path
    choose: bool = False  # the program holds every policy: --collectives picks this one
    status: str = "skipped"  # ok | failed | timeout | skipped
    detail: str = ""
    wall: float = 0.0
    result: dict = field(default_factory=dict)

    def number(self, key: str) -> float | None:
        try:
            return float(self.result[key])
        except (KeyError, ValueError):
            return None


def discover(build_dir: Path) -> list[tuple[str, str, Path, bool]]:
    """(stack, policy, program, whether --collectives picks the policy) for every program."""
    folder = build_dir / "examples" / "md_replicated"
    found = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        if path.name.startswith("md_replicated_simgrid"):
            continue  # simulated seconds: no row of a table of measured ones (README.md)
        if path.name.startswith("md_replicated_faulty_"):
            continue  # faults on purpose: the recovery row runs them (recovery_row)
        if m := VARIANT.match(path.name):
            found.append((m["stack"], m["policy"], path, False))
        elif m := EVERY_POLICY.match(path.name):
            listed = subprocess.run([str(path), "--list-collectives"], capture_output=True,
                                    text=True, timeout=60)
            if listed.returncode != 0:
                raise RuntimeError(f"{path} --list-collectives: exit {listed.returncode}: "
                                   f"{listed.stderr.strip()}")
            found += [(m["stack"], policy, path, True) for policy in listed.stdout.split()]
    # A build tree that had one program per policy before keeps them: the newer program wins.
    chosen = {(stack, policy): (stack, policy, path, choose)
              for stack, policy, path, choose in sorted(found, key=lambda v: v[3])}
    return list(chosen.values())


def command_for(run: Run, args, commxrun: Path) -> tuple[list[str], dict]:
    program = [str(run.binary), "--atoms-cells", str(args.cells), "--steps", str(args.steps),
               "--thermo-every", "10"]
    if run.choose:
        program += ["--collectives", run.policy]
    if args.reference:
        program += ["--reference", str(args.reference)]
    return launched(run.stack, run.ranks, program, args.timeout, commxrun)


def parse_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        line = RANK_PREFIX.sub("", line)
        if line.startswith("RESULT "):
            return dict(item.split("=", 1) for item in line.split()[1:] if "=" in item)
    return {}


def execute(run: Run, args, commxrun: Path) -> None:
    command, env = command_for(run, args, commxrun)
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.timeout + 10)
    except subprocess.TimeoutExpired:
        run.status, run.detail = "timeout", f"no answer in {args.timeout} s"
        run.wall = time.monotonic() - start
        return
    except OSError as e:
        run.status, run.detail = "failed", str(e)
        return
    run.wall = time.monotonic() - start
    run.result = parse_result(done.stdout)
    # Exit 3 is the program's "ran, but the thermo did not match": a result, not a failure.
    if run.result and done.returncode in (0, 3):
        run.status = "ok"
    else:
        run.status = "timeout" if done.returncode == 124 else "failed"
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        run.detail = f"exit {done.returncode}: {last[:160]}"


# --- the communication model -----------------------------------------------------------------

def measure_link(stack: str, build_dir: Path) -> tuple[float, float] | None:
    """(alpha s, 1 / beta B/s): seed 000's C(n) = alpha + n * beta fitted to this stack's own
    ping-pong, bench_pingpong_<stack> on 2 ranks at every size from 0 B to 4 MiB, as
    scripts/alpha_beta.py fits it; None if the bench was not built or the fit is not a cost."""
    try:
        alpha, beta, _ = fit(measure(stack, build_dir, repetitions=3, min_time=0.1,
                                     timeout=120))
    except (OSError, RuntimeError, ValueError, KeyError, IndexError,
            subprocess.TimeoutExpired):
        return None
    return alpha, 1 / beta


def parse_link(text: str) -> tuple[str, float, float]:
    """STACK=LATENCY_US,BANDWIDTH_GBPS, e.g. shm=1.5,8."""
    stack, values = text.split("=", 1)
    latency_us, bandwidth_gbs = (float(v) for v in values.split(","))
    return stack, latency_us * 1e-6, bandwidth_gbs * 1e9


def predicted_allreduce(policy: str, reduction: str, nbytes: float, latency: float,
                        bandwidth: float, combine: float) -> float:
    """Time of one 2-rank allreduce of nbytes: seed 000's cost per message, C = latency +
    n / bandwidth, for the messages the policy's algorithm sends one after the other at 2 ranks,
    plus `combine`, the measured time of one local add of the whole buffer."""
    one_message = latency + nbytes / bandwidth
    if reduction == "reproducible" or policy in ("flat", "hierarchical"):
        # To rank 0, added there, sent back: two messages in turn. (hierarchical on one node is
        # its node-local reduce and bcast.)
        return 2 * one_message + combine
    if policy == "ring":
        # Reduce-scatter then allgather: each a half-buffer exchange; each rank adds one half.
        return 2 * (latency + nbytes / 2 / bandwidth) + combine / 2
    # binomial (and tuned, which picks recursive doubling or ring here): one simultaneous
    # exchange, then each rank adds the whole buffer.
    return one_message + combine


# --- output --------------------------------------------------------------------------------

def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(runs: list[Run]) -> list[dict]:
    fastest: dict[tuple[str, int], float] = {}
    baseline: dict[int, float] = {}
    for r in runs:
        t = r.number("time_per_step_ms")
        if r.status == "ok" and t is not None:
            key = (r.policy, r.ranks)
            fastest[key] = min(fastest.get(key, t), t)
            if r.policy == BASELINE_POLICY:
                baseline[r.ranks] = t
    rows = []
    for r in runs:
        t = r.number("time_per_step_ms")
        best = fastest.get((r.policy, r.ranks))
        mpi = baseline.get(r.ranks)
        rows.append({
            "stack": r.stack, "policy": r.policy, "ranks": r.ranks, "status": r.status,
            "time_per_step_ms": t,
            "comm_fraction": r.number("comm_fraction"),
            "send_ms_per_step": r.number("send_ms"),
            "wait_ms_per_step": r.number("wait_ms"),
            "force_ms_per_step": r.number("force_ms"),
            "bytes_per_step": r.number("bytes_per_step"),
            "slowdown": (t / best) if (t is not None and best) else None,
            "vs_mpi": (t / mpi) if (t is not None and mpi) else None,
            "thermo_match": r.result.get("thermo_match", "-") if r.status == "ok" else r.status,
            "thermo_max_rel_err": r.number("thermo_max_rel_err"),
            "replicas_agree": r.result.get("replicas_agree", "-"),
            "atoms": r.result.get("atoms", ""), "steps": r.result.get("steps", ""),
            "detail": r.detail,
        })
    return rows


def print_table(rows: list[dict]) -> None:
    head = (f"{'stack':<11} {'policy':<13} {'ranks':>5} {'ms/step':>9} {'vs MPI':>7} "
            f"{'comm %':>7} {'send ms':>8} {'wait ms':>8} {'slowdown':>8}  thermo")
    print(head)
    print("-" * len(head))
    for row in rows:
        if row["status"] != "ok":
            print(f"{row['stack']:<11} {row['policy']:<13} {row['ranks']:>5} {row['status']:>9}"
                  f"  {row['detail']}")
            continue
        cf = row["comm_fraction"]
        print(f"{row['stack']:<11} {row['policy']:<13} {row['ranks']:>5} "
              f"{fmt(row['time_per_step_ms'], '9.2f')} {fmt(row['vs_mpi'], '7.2f')} "
              f"{fmt(None if cf is None else 100 * cf, '7.1f')} "
              f"{fmt(row['send_ms_per_step'], '8.3f')} {fmt(row['wait_ms_per_step'], '8.3f')} "
              f"{fmt(row['slowdown'], '8.2f')}  {row['thermo_match']}")


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


def stacks_figure(rows: list[dict], atoms: int, plt):
    """How long a step takes on each stack (default policy) at each rank count, against the
    MPI baseline: a panel per rank count, a bar per stack. None without a successful run."""
    ok = [r for r in rows if r["status"] == "ok" and r["time_per_step_ms"] is not None]
    stacks = sorted({r["stack"] for r in ok if r["policy"] != BASELINE_POLICY},
                    key=lambda s: STACKS.index(s) if s in STACKS else len(STACKS))
    if not stacks:
        return None
    ranks = sorted({r["ranks"] for r in ok})
    baseline = {r["ranks"]: r["time_per_step_ms"] for r in ok if r["policy"] == BASELINE_POLICY}
    cell = {(r["stack"], r["policy"], r["ranks"]): r for r in ok}
    policy = DEFAULT_POLICY if any(r["policy"] == DEFAULT_POLICY for r in ok) else \
        next(r["policy"] for r in ok if r["policy"] != BASELINE_POLICY)
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.2 * len(ranks), 1.3 + 0.42 * len(stacks)),
                             sharey=True, squeeze=False, layout="constrained")
    top = max(r["time_per_step_ms"] for r in ok) * 1.35
    for ax, n in zip(axes[0], ranks):
        ys = list(range(len(stacks)))
        times = [cell[(s, policy, n)]["time_per_step_ms"] if (s, policy, n) in cell else 0
                 for s in stacks]
        ax.barh(ys, times, color="#4c72b0", height=0.65)
        for y, s, t in zip(ys, stacks, times):
            ratio = cell[(s, policy, n)]["vs_mpi"] if (s, policy, n) in cell else None
            ax.text(t, y, f" {t:.2f}" + (f" ({ratio:.2f}x)" if ratio else ""), va="center",
                    fontsize=9)
        title = f"{n} rank{'s' if n > 1 else ''}"
        if n in baseline:
            ax.axvline(baseline[n], color="#c44e52", linestyle="--", linewidth=1.5)
            title += f" (MPI {baseline[n]:.2f} ms, dashed)"
        ax.set_yticks(ys)
        ax.set_yticklabels(stacks)
        ax.invert_yaxis()
        ax.set_xlim(0, top)
        ax.set_xlabel("ms per step")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"md_replicated, {atoms} atoms: time per step by stack ({policy} collectives; "
                 "ratio to the MPI baseline in brackets)", fontsize=11)
    return fig


def policies_figure(rows: list[dict], atoms: int, plt):
    """Which policy suits which stack: every policy's time per step over the MPI baseline's,
    a panel per rank count above 1 (where no policy communicates). None when nothing to show."""
    ok = [r for r in rows if r["status"] == "ok" and r["vs_mpi"] is not None]
    stacks = sorted({r["stack"] for r in ok if r["policy"] != BASELINE_POLICY},
                    key=lambda s: STACKS.index(s) if s in STACKS else len(STACKS))
    policies = [p for p in POLICIES if p != BASELINE_POLICY and any(r["policy"] == p for r in ok)]
    counts = sorted({r["ranks"] for r in ok if r["ranks"] > 1})
    if not stacks or not policies or not counts:
        return None
    cell = {(r["stack"], r["policy"], r["ranks"]): r["vs_mpi"] for r in ok}
    fig, axes = plt.subplots(1, len(counts),
                             figsize=(1.6 + 1.0 * len(policies) * len(counts),
                                      1.6 + 0.42 * len(stacks)),
                             sharey=True, squeeze=False, layout="constrained")
    image = None
    for ax, n in zip(axes[0], counts):
        grid = [[cell.get((s, p, n), float("nan")) for p in policies] for s in stacks]
        image = ax.imshow(grid, cmap="RdYlGn_r", vmin=0.7, vmax=1.3, aspect="auto")
        for y, row in enumerate(grid):
            for x, value in enumerate(row):
                ax.text(x, y, "-" if value != value else f"{value:.2f}", ha="center",
                        va="center", fontsize=9)
        ax.set_xticks(range(len(policies)))
        ax.set_xticklabels(policies, rotation=30, ha="right")
        ax.set_yticks(range(len(stacks)))
        ax.set_yticklabels(stacks)
        ax.set_title(f"{n} ranks", fontsize=10)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="time per step / MPI baseline's")
    fig.suptitle(f"md_replicated, {atoms} atoms: every policy on every stack, against MPI",
                 fontsize=11)
    return fig


def write_charts(rows: list[dict], folder: Path, atoms: int) -> list[str]:
    """comparison.png (stacks_figure) and policies.png (policies_figure), sized so that every
    label reads at the PNG's own size (tests/scripts/md_charts_test.py checks that no two
    labels overlap)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["matplotlib is not installed (python3-matplotlib): no chart"]
    made = []
    for name, figure in (("comparison.png", stacks_figure), ("policies.png", policies_figure)):
        fig = figure(rows, atoms, plt)
        if fig is None:
            continue
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        made.append(f"chart: {folder / name}")
    return made or ["no successful run: no chart"]


def model_report(runs: list[Run], links: dict, args) -> list[str]:
    lines = []
    for r in runs:
        if r.status != "ok" or r.ranks != 2:
            continue
        link = links.get(r.stack)
        t_step = r.number("time_per_step_ms")
        measured = r.number("transfer_fraction")
        total = r.number("comm_fraction")
        atoms = r.number("atoms")
        combine = (r.number("combine_ms") or 0.0) * 1e-3
        if link is None or t_step is None or measured is None or atoms is None:
            lines.append(f"  {r.stack:<11} {r.policy:<13} no ping-pong figures for this stack "
                         f"(pass --link {r.stack}=LATENCY_US,BANDWIDTH_GBPS)")
            continue
        latency, bandwidth = link
        nbytes = (3 * atoms + 2) * 8
        predicted_s = predicted_allreduce(r.policy, r.result.get("reduction", "policy"), nbytes,
                                          latency, bandwidth, combine)
        predicted = predicted_s * 1e3 / t_step
        ratio = measured / predicted if predicted > 0 else float("nan")
        lines.append(f"  {r.stack:<11} {r.policy:<13} {100 * predicted:9.1f}% "
                     f"{100 * measured:9.1f}% {ratio:9.2f} {fmt(total and 100 * total, '9.1f')}%"
                     f"   {predicted_s * 1e3:.3f} ms of {t_step:.2f}")
    return lines


def recovery_row(args, commxrun: Path, stack: str = "shm",
                 ranks: int = 4) -> tuple[list[str], bool]:
    """The run that loses a rank (issue 50): md_replicated_faulty_<stack> --survive at `ranks`
    ranks, rank 2 killed by its fault plan about halfway, against the same run without a loss
    and one with a rank fewer from the start. Lines to print, and whether all three runs
    reported and ended with the same fingerprint."""
    program = args.build_dir / "examples" / "md_replicated" / f"md_replicated_faulty_{stack}"
    if not program.is_file():
        return [f"recovery row: no {program.name} under {args.build_dir}"], False
    common = [str(program), "--atoms-cells", str(args.cells), "--steps", str(args.steps),
              "--thermo-every", "10", "--survive"]

    def survive(n: int, faults: str) -> tuple[dict, str, float]:
        command, env = launched(stack, n, common, args.timeout, commxrun)
        command = [command[0], "--keep-going", *command[1:]]  # a killed rank stops no one
        env["COMMX_FAULTS"] = faults
        start = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.timeout + 10)
        wall = time.monotonic() - start
        return parse_result(done.stdout), done.stdout, wall

    whole, whole_out, whole_wall = survive(ranks, "")
    fewer, fewer_out, _ = survive(ranks - 1, "")
    # Halfway through the steps: the setup and launch before the loop are short beside them.
    loop = float(whole.get("time_per_step_ms", 0)) * args.steps / 1e3
    at_ms = int((whole_wall - loop + loop / 2) * 1e3)
    killed, killed_out, _ = survive(ranks, f"kill@2:at={at_ms}ms")
    prints = re.compile(r"final state fingerprint: ([0-9a-f]+)")
    recovered = re.search(r"recovered: lost rank 2 in step (\d+); back to step (\d+); .*; "
                          r"([0-9.]+) ms", killed_out)
    marks = [prints.search(out) for out in (whole_out, fewer_out, killed_out)]
    if not all(marks) or not recovered:
        return [f"recovery row: a run did not report (rank 2 killed at {at_ms} ms): "
                f"{killed_out.strip().splitlines()[-1:] if killed_out.strip() else 'no output'}"
                ], False
    same = marks[0][1] == marks[1][1] == marks[2][1]
    per_step = {name: float(r.get("time_per_step_ms", "nan"))
                for name, r in (("whole", whole), ("fewer", fewer), ("killed", killed))}
    return [
        f"recovery ({stack}, {ranks} ranks, --survive, fixed-point sums): rank 2 killed in step "
        f"{recovered[1]} of {args.steps}, survivors back to step {recovered[2]}, recovered in "
        f"{recovered[3]} ms; final fingerprint {marks[2][1]}: "
        + ("the same" if same else "DIFFERENT") + f" as without a loss ({marks[0][1]}) and "
        f"with {ranks - 1} ranks from the start ({marks[1][1]})",
        f"  ms per step: {ranks} ranks {per_step['whole']:.2f}; killed run (the survivors' "
        f"steps, done again included) {per_step['killed']:.2f}; {ranks - 1} ranks from the "
        f"start {per_step['fewer']:.2f}",
    ], same


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--results", type=Path, default=Path("results/md"))
    p.add_argument("--cells", type=int, default=20, help="fcc cells per side (20: 32000 atoms)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--policies", nargs="+", default=POLICIES, choices=POLICIES)
    p.add_argument("--stacks", nargs="+", default=STACKS, choices=STACKS,
                   help="the stacks to run (default: every one that was built)")
    p.add_argument("--reference", type=Path,
                   default=Path("examples/md_replicated/reference/thermo.lj32000.txt"),
                   help="thermo table to match (the default suits --cells 20)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for all runs; runs that would start later are skipped "
                        "(default: every run)")
    p.add_argument("--link", action="append", default=[], type=parse_link,
                   help="STACK=LATENCY_US,BANDWIDTH_GBPS for the model, instead of measuring")
    args = p.parse_args()
    if args.cells != 20 and args.reference == p.get_default("reference"):
        args.reference = None  # the default table is for 32000 atoms

    variants = [v for v in discover(args.build_dir)
                if v[1] in args.policies and (v[1] == BASELINE_POLICY or v[0] in args.stacks)]
    if not variants:
        print(f"md_compare: no md_replicated_<stack> programs under {args.build_dir} for "
              f"stacks {' '.join(args.stacks)} and policies {' '.join(args.policies)}",
              file=sys.stderr)
        return 1
    commxrun = args.build_dir / "tools" / "commxrun" / "commxrun"
    stacks = sorted({s for s, _, _, _ in variants}, key=lambda s: (s != "inproc", s))
    if "mpi" in stacks and shutil.which("mpirun") is None:
        print("md_compare: mpirun not found; the mpi runs will fail", file=sys.stderr)

    # The baseline, then every stack with the default policy, so a short budget still
    # compares the stacks with MPI.
    def importance(v):
        stack, policy, _, _ = v
        return (policy != BASELINE_POLICY, policy != DEFAULT_POLICY, POLICIES.index(policy),
                stacks.index(stack))
    runs = [Run(s, pol, n, path, choose) for s, pol, path, choose in sorted(variants,
                                                                            key=importance)
            for n in args.ranks]

    print(f"md_compare: {len(runs)} runs ({len(stacks)} stacks: {', '.join(stacks)}; "
          f"{len({v[1] for v in variants})} policies; ranks {' '.join(map(str, args.ranks))}), "
          f"{4 * args.cells ** 3} atoms, {args.steps} steps, "
          + (f"budget {args.budget:.0f} s" if args.budget else "no time budget"),
          flush=True)
    line_before = cache_line_ns(args.build_dir)
    start = time.monotonic()
    spent = []
    for k, run in enumerate(runs, 1):
        elapsed = time.monotonic() - start
        expected = max(spent) if spent else 0
        if args.budget is not None and elapsed + expected > args.budget:
            run.detail = f"time budget of {args.budget:.0f} s spent"
            continue
        print(f"[{k:>3}/{len(runs)}] {elapsed:6.1f} s  {run.stack} {run.policy} {run.ranks} "
              f"rank{'s' if run.ranks > 1 else ''} ...", end="", flush=True)
        execute(run, args, commxrun)
        spent.append(run.wall)
        t = run.number("time_per_step_ms")
        print(f" {run.status} ({run.wall:.1f} s" + (f", {t:.2f} ms/step)" if t else ")"),
              flush=True)

    mode = vm_mode(line_before, cache_line_ns(args.build_dir))
    rows = table(runs)
    skipped = sum(r.status == "skipped" for r in runs)
    print()
    print(f"md_replicated: {4 * args.cells ** 3} atoms, {args.steps} steps. Times are ms per "
          "step; vs MPI is the time over the MPI baseline's (mpi raw: the kernel on "
          "MPI_Allreduce, no commx) at the same rank count; send/wait are per rank (mean); "
          "slowdown is against the fastest stack with the same policy and rank count; thermo: "
          f"matched the LAMMPS reference to 1e-10 (step 0) and 1e-8. Load average "
          f"{os.getloadavg()[0]:.2f}; {mode}.")
    print_table(rows)
    if skipped:
        print(f"{skipped} runs skipped: the {args.budget:.0f} s budget was spent "
              "(raise --budget, or choose --policies).")

    links = {stack: (lat, bw) for stack, lat, bw in args.link}
    for stack in stacks:
        if stack not in links and any(r.stack == stack and r.ranks == 2 and r.status == "ok"
                                      for r in runs):
            measured = measure_link(stack, args.build_dir)
            if measured:
                links[stack] = measured
    print("\ncommunication model, 2 ranks: one allreduce of 3N+2 doubles per step from the "
          "stack's latency alpha and bandwidth 1/beta (seed 000's C(n) = alpha + n beta, fitted "
          "to its ping-pong at 0 B-4 MiB as scripts/alpha_beta.py fits it) plus one local add "
          "of the buffer.\n"
          "  'transfer' is the measured time in the allreduce after the last rank arrived "
          "(load imbalance taken out); 'all comm' also counts waiting for the slower rank.")
    for stack, (lat, bw) in sorted(links.items()):
        print(f"  {stack}: latency {lat * 1e6:.2f} us, bandwidth {bw / 1e9:.2f} GB/s")
    print(f"  {'stack':<11} {'policy':<13} {'predicted':>10} {'transfer':>10} {'ratio':>9} "
          f"{'all comm':>10}   predicted time per step")
    for line in model_report(runs, links, args) or ["  no 2-rank run to model"]:
        print(line)

    args.results.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.results / "comparison.csv")
    (args.results / "conditions.txt").write_text(
        f"load average {os.getloadavg()[0]:.2f} after the runs; {mode}\n")
    print(f"\ntable: {args.results / 'comparison.csv'}")
    for line in write_charts(rows, args.results, 4 * args.cells ** 3):
        print(line)
    recovery, recovered_same = recovery_row(args, commxrun) if "shm" in args.stacks else ([], True)
    print()
    for line in recovery:
        print(line)
    (args.results / "recovery.txt").write_text("\n".join(recovery) + "\n")
    failed = [r for r in runs if r.status in ("failed", "timeout")]
    if not recovered_same:
        print("md_compare: the run that lost a rank did not end with the same bits",
              file=sys.stderr)
        return 1
    mismatched = [r for r in runs if r.status == "ok" and r.result.get("thermo_match") == "no"]
    if failed or mismatched:
        print(f"md_compare: {len(failed)} runs failed, {len(mismatched)} did not match the "
              "reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
