#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Jobs of 8 to 256 ranks on this machine, commx beside Open MPI and MPICH.

Runs bench_scale_<stack>_<policy> (scale_bench.cpp) under commxrun and bench_mpi_scale
(mpi_scale_bench.cpp) under Open MPI's mpirun (vader, and its tcp BTL; --oversubscribe,
mpi_yield_when_idle 1) and MPICH's mpiexec, at each rank count, `--runs` times interleaved
(each round runs every program once at every count), and prints per program and count the
medians of start-up, allreduce 8 B and 64 KiB, bcast 8 B, the most descriptors and resident
memory of a rank; then the ratios of commx's best policy on each stack to Open MPI's, over all
runs and over the runs of each of the VM's modes (a cache line's crossing read with
bench_cache_line before each run and after it, while no job runs: one die, two dies, or
changing; the table counts each program's runs in each). Writes
results/bench/scale/scale.csv and, with matplotlib, scale.png (time against rank count; `--plot
results/bench/scale/scale.csv` draws it again).

    python3 bench/scale.py [--build-dir build/release] [--ranks 8 16 32 64 128 256] [--runs 3]
                           [--before-build OTHER_BUILD [--with-mpi]]
    python3 bench/scale.py --bootstrap [--ranks ...]

With --bootstrap it compares the ways a network stack finds its endpoints instead: tcp and
shm+tcp (4 nodes, COMMX_NODE) started by Open MPI's mpirun, once through mpirun's PMIx server
(bootstrap/pmix.hpp) and once through the COMMX_ROOT rendezvous (a free port, a fresh token),
and prints the ratio of the start-ups (PMIx / rendezvous); results/bench/scale/bootstrap.csv.

Every job makes the issue's calls (200 allreduces of 8 B, 20 of 64 KiB, 200 broadcasts) at
every count: fewer at large counts made the first calls' costs (pages touched for the first
time) most of a figure. Open MPI's start-up (a minute at 256 ranks) is most of the run. MPICH's
driver is compiled by hand with mpicxx.mpich into build/mpich/ (scripts/launching.py).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from launching import STACKS  # noqa: E402  (every stack's name)
from launching import built_against_mpich, cache_line_ns, line_mode  # noqa: E402
FIELDS = ["start_s", "allreduce8_us", "allreduce64k_us", "bcast8_us", "max_fds", "max_rss_mb"]
LINE = re.compile(r"(\S+) ranks=(\d+) " + " ".join(rf"{f}=([\d.]+)" for f in FIELDS))


MODES = ["fast", "slow", "mixed", "unknown"]  # launching.line_mode's, or no bench_cache_line
CALLS = 200  # rounds: allreduces and broadcasts of 8 B; a tenth as many of 64 KiB


def commx_programs(build: Path, stacks: list[str], policies: list[str],
                   suffix: str) -> dict[str, list[str]]:
    """name -> command prefix of commx's programs as `build` built them, named with `suffix`."""
    commxrun = str(build / "tools/commxrun/commxrun")
    out = {}
    for stack in stacks:
        built = [p for p in policies if (build / f"bench/bench_scale_{stack}_{p}").exists()]
        if not built:
            raise SystemExit(f"scale: no bench_scale_{stack}_<policy> under {build / 'bench'}: "
                             "built for shm, tcp, shm_tcp and wan (COMMX_BENCH_EVERY_STACK=ON)")
        for policy in built:
            exe = build / f"bench/bench_scale_{stack}_{policy}"
            extra = ["--nodes", "4"] if stack == "shm_tcp" else []
            out[f"commx {stack} {policy}{suffix}"] = [commxrun, "--timeout", "900", *extra,
                                                      "-n", "{n}", str(exe)]
    return out


def programs(build: Path, stacks: list[str], policies: list[str],
             before: Path | None = None, with_mpi: bool = True) -> dict[str, list[str]]:
    """name -> command prefix (the rank count and the calls are added per run)."""
    out = commx_programs(build, stacks, policies, "")
    if before is not None:
        out.update(commx_programs(before, stacks, policies, " before"))
    if not with_mpi:
        return out
    ompi = build / "bench/bench_mpi_scale"
    if ompi.exists():
        base = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--mca",
                "mpi_yield_when_idle", "1", "--bind-to", "none", "-np", "{n}"]
        out["Open MPI vader"] = base[:1] + ["--mca", "btl", "self,vader"] + base[1:] + [str(ompi)]
        out["Open MPI tcp"] = base[:1] + ["--mca", "btl", "self,tcp"] + base[1:] + [str(ompi)]
    mpich = built_against_mpich(ROOT / "bench/mpi_scale_bench.cpp")
    if mpich:
        out["MPICH"] = ["mpiexec.mpich", "-n", "{n}", str(mpich)]
    return out


def bootstrap_programs(build: Path, stacks: list[str]) -> dict[str, list[str]]:
    """The same mpirun launch of bench_scale_<stack>_binomial, through PMIx and through the
    rendezvous at COMMX_ROOT ({port} is a free port, chosen per run)."""
    out = {}
    mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
              "-np", "{n}"]
    for stack in stacks:
        exe = build / f"bench/bench_scale_{stack}_binomial"
        if stack not in ("tcp", "shm_tcp") or not exe.exists():
            continue
        # shm+tcp on 4 nodes of this machine, as commxrun --nodes 4 makes them.
        nodes = (["sh", "-c", 'COMMX_NODE=n$((OMPI_COMM_WORLD_RANK * 4 / OMPI_COMM_WORLD_SIZE)) '
                  'exec "$@"', "sh"] if stack == "shm_tcp" else [])
        out[f"commx {stack} PMIx"] = ["env", "-u", "COMMX_ROOT", "COMMX_BOOTSTRAP=pmix",
                                      *mpirun, *nodes, str(exe)]
        out[f"commx {stack} COMMX_ROOT"] = ["env", "COMMX_ROOT=127.0.0.1:{port}",
                                            f"COMMX_TOKEN={os.urandom(16).hex()}",
                                            "COMMX_BOOTSTRAP=root", *mpirun, *nodes, str(exe)]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(command: list[str], ranks: int, timeout: float) -> dict[str, float] | None:
    port = str(free_port())
    args = [a.replace("{n}", str(ranks)).replace("{port}", port) for a in command]
    args.append(str(CALLS))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    for line in done.stdout.splitlines():
        m = LINE.search(line)
        if m and int(m.group(2)) == ranks:
            return {f: float(v) for f, v in zip(FIELDS, m.groups()[2:])}
    sys.stderr.write(f"scale: {' '.join(args)} printed no result "
                     f"(exit {done.returncode}): {done.stderr[-400:]}\n")
    return None


def plot(rows: list[dict], path: Path) -> None:
    """Time against rank count, one line per program (log-log), into `path`; nothing without
    matplotlib (Debian's python3-matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("scale: no matplotlib, no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 4, figsize=(19, 5))
    for ax, field, title in zip(axes, ["start_s", "allreduce8_us", "allreduce64k_us", "bcast8_us"],
                                ["start-up (s)", "allreduce 8 B (us)", "allreduce 64 KiB (us)",
                                 "bcast 8 B (us)"]):
        for name in sorted({r["program"] for r in rows if r["runs"]}):
            pts = sorted((r["ranks"], r[field]) for r in rows
                         if r["program"] == name and r["runs"])
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=name,
                    linestyle="--" if not name.startswith("commx") else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (on 2 cores)")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"scale: wrote {path}", file=sys.stderr)


def best_over(mine: list[dict[str, float]], theirs: dict[str, float]) -> str:
    """commx's best (of `mine`, one per policy) over Open MPI's `theirs`, for the timed fields."""
    return ", ".join(f"{f.split('_')[0]} {min(m[f] for m in mine) / theirs[f]:.2f}x"
                     for f in FIELDS[:4] if theirs[f] > 0)


def read_rows(path: Path) -> list[dict]:
    """scale.csv's rows, numbers as numbers."""
    with path.open(newline="") as f:
        return [{k: (v if k == "program" else float(v) if "." in v else int(v))
                 for k, v in row.items()} for row in csv.DictReader(f)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=str(ROOT / "build/release"))
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--stacks", nargs="+", default=["shm", "tcp", "shm_tcp"], choices=STACKS)
    p.add_argument("--policies", nargs="+", default=["binomial", "tuned"])
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--before-build", type=Path,
                   help="also run commx's programs as this build made them (a change's before)")
    p.add_argument("--with-mpi", action="store_true",
                   help="with --before-build, run Open MPI and MPICH too")
    p.add_argument("--bootstrap", action="store_true",
                   help="compare PMIx with the COMMX_ROOT rendezvous under mpirun (tcp, shm+tcp)")
    p.add_argument("--mpich-max-ranks", type=int, default=32,
                   help="run MPICH up to this many ranks only: it polls without yielding, and "
                        "oversubscribed 16 times an 8-byte allreduce took it 0.2 s")
    p.add_argument("--plot", type=Path, metavar="SCALE_CSV",
                   help="only draw scale.png beside this scale.csv of an earlier run")
    args = p.parse_args()
    if args.plot:
        plot(read_rows(args.plot), args.plot.with_suffix(".png"))
        return 0
    build = Path(args.build_dir)
    progs = (bootstrap_programs(build, args.stacks) if args.bootstrap
             else programs(build, args.stacks, args.policies, args.before_build,
                          args.before_build is None or args.with_mpi))
    if not progs:
        print("scale: no bench_scale_* program; build the target bench_scale_all", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    failed: dict[tuple[str, int], int] = {}
    # The VM's mode around each run: a cache line's crossing just before it and just before the
    # next (or after the last), read while no job runs; a run's mode is its own two readings'.
    line = cache_line_ns(build)
    for round_ in range(args.runs):
        for ranks in args.ranks:
            for name, command in progs.items():
                if name == "MPICH" and ranks > args.mpich_max_ranks:
                    continue
                began = time.monotonic()
                got = run(command, ranks, args.timeout)
                line_after = cache_line_ns(build)
                mode = (line_mode(line, line_after) if line is not None and line_after is not None
                        else "unknown")
                line = line_after
                if got is None:
                    failed[(name, ranks)] = failed.get((name, ranks), 0) + 1
                else:
                    results.setdefault((name, ranks), []).append({**got, "mode": mode})
                print(f"round {round_ + 1}: {name} at {ranks}: "
                      f"{'failed' if got is None else 'ok'} ({time.monotonic() - began:.0f} s, "
                      f"{mode})", file=sys.stderr, flush=True)
    out = ROOT / "results/bench/scale"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    by_mode: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    for (name, ranks), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row = {"program": name, "ranks": ranks, "runs": len(runs),
               "failed": failed.get((name, ranks), 0)}
        for f in FIELDS:
            row[f] = statistics.median(r[f] for r in runs)
        for mode in MODES:
            row[f"{mode}_runs"] = sum(r["mode"] == mode for r in runs)
        rows.append(row)
        by_mode[(name, ranks)] = {
            mode: {f: statistics.median(r[f] for r in runs if r["mode"] == mode) for f in FIELDS}
            for mode in ("fast", "slow") if any(r["mode"] == mode for r in runs)}
    for (name, ranks), count in failed.items():
        if (name, ranks) not in results:
            rows.append({"program": name, "ranks": ranks, "runs": 0, "failed": count})
    name = ("bootstrap.csv" if args.bootstrap
            else "before_after.csv" if args.before_build is not None else "scale.csv")
    with open(out / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["program", "ranks", "runs", "failed", *FIELDS,
                                          *(f"{mode}_runs" for mode in MODES)])
        w.writeheader()
        w.writerows(rows)
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"medians of {args.runs} runs")
    print("| program | ranks | start (s) | allreduce 8 B (us) | allreduce 64 KiB (us) | "
          "bcast 8 B (us) | descriptors | RSS (MB) | failed | runs one die / two / changing |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["runs"] == 0:
            print(f"| {r['program']} | {r['ranks']} | did not run | | | | | | {r['failed']} | |")
            continue
        print(f"| {r['program']} | {r['ranks']} | {r['start_s']:.2f} | {r['allreduce8_us']:.0f} | "
              f"{r['allreduce64k_us']:.0f} | {r['bcast8_us']:.0f} | {r['max_fds']:.0f} | "
              f"{r['max_rss_mb']:.1f} | {r['failed']} | "
              f"{r['fast_runs']} / {r['slow_runs']} / {r['mixed_runs']} |")
    by = {(r["program"], r["ranks"]): r for r in rows if r["runs"]}
    if args.bootstrap:
        print("\nstart-up through PMIx / through the COMMX_ROOT rendezvous, same mpirun:")
        for stack in args.stacks:
            for ranks in args.ranks:
                pmix = by.get((f"commx {stack} PMIx", ranks))
                root = by.get((f"commx {stack} COMMX_ROOT", ranks))
                if pmix and root and root["start_s"] > 0:
                    print(f"  {stack} at {ranks}: {pmix['start_s'] / root['start_s']:.2f}x "
                          f"({pmix['start_s']:.3f} s against {root['start_s']:.3f} s)")
        return 0
    if args.before_build is not None:
        print("\nafter / before (this build over --before-build's), medians:")
        for name in sorted({n for n, _ in by if not n.endswith(" before")}):
            for ranks in args.ranks:
                now, then = by.get((name, ranks)), by.get((f"{name} before", ranks))
                if now and then:
                    text = ", ".join(f"{f} {now[f] / then[f]:.2f}x" for f in FIELDS if then[f] > 0)
                    print(f"  {name} at {ranks}: {text}")
    print("\nratio of commx's best policy to Open MPI (vader for shm, tcp for tcp and shm+tcp); "
          "then over the runs of one mode alone (one die, two dies), where both have some:")
    for stack in args.stacks:
        ref = "Open MPI vader" if stack == "shm" else "Open MPI tcp"
        for ranks in args.ranks:
            mine = [(f"commx {stack} {p}", ranks) for p in args.policies]
            mine = [key for key in mine if key in by]
            if not mine or (ref, ranks) not in by:
                continue
            parts = [best_over([by[key] for key in mine], by[(ref, ranks)])]
            for mode, label in (("fast", "one die"), ("slow", "two dies")):
                ours = [by_mode[key][mode] for key in mine if mode in by_mode[key]]
                if ours and mode in by_mode[(ref, ranks)]:
                    parts.append(f"{label}: {best_over(ours, by_mode[(ref, ranks)][mode])}")
            print(f"  {stack} at {ranks}: " + "; ".join(parts))
    if args.before_build is None:
        plot(rows, out / "scale.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
