#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs the PMB/IMB set (seed 002) on every stack side by side, in interleaved rounds: each
round runs every stack once at every rank count, so a slow spell of a shared machine falls on
all of them alike. Writes one Google Benchmark JSON file per round, stack and rank count under
RESULTS/round<k>/, which scripts/pmb_report.py (the side-by-side table) and
scripts/tune_collectives.py (coll::tuned's table per stack) read, round by round.

    python3 scripts/pmb_sweep.py [--build-dir build/release] [--ranks 2 4] [--rounds 5]
                                 [--stacks inproc shm tcp wan mpi openmpi openmpi-tcp mpich]

Each round also times a cache line crossing between CPUs 0 and 1 (bench_cache_line) before and
after its runs, into round<k>/mode.txt, and around each run, into <stack>-np<k>.mode.txt beside
its results: this VM moves between a fast mode (about 40 ns) and a slow one (about 200 ns)
every few minutes, pmb_report.py counts the goals per mode, and tune_collectives.py rates each
policy by its worse mode. `--mode slow` (or fast) waits before each run, up to --mode-wait
seconds, until the VM is in that mode: a 4-rank run of several seconds meets a mode change as
often as not, so without it a sweep gathers few runs of the rarer mode.

Stacks: inproc is bench_collectives (ranks as threads); shm, tcp, wan and mpi are
bench_pmb_<stack>, launched as the main job launches them (scripts/md_compare.py); openmpi is
Open MPI's own collectives (bench_mpi_collectives) on its default transports (vader on one
node), openmpi-tcp the same over its TCP BTL only, the layout tcp and wan have; mpich is MPICH's
collectives (the same driver compiled with mpicxx.mpich into build/mpich/) on its default ch4
device, told to yield while it polls as Open MPI is (MPIR_CVAR_POLLS_BEFORE_YIELD=1).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launching import STACKS as COMMX_STACKS  # noqa: E402  (the main job's launch rules)
from launching import built_against_mpich, cache_line_ns, launched, line_mode  # noqa: E402
from launching import program_for  # noqa: E402

STACKS = [*COMMX_STACKS, "openmpi", "openmpi-tcp", "mpich"]


def mpich_driver() -> Path | None:
    """bench_mpi_collectives' source built against MPICH (None without MPICH)."""
    return built_against_mpich(Path(__file__).resolve().parent.parent / "bench" /
                               "mpi_collectives_bench.cpp", ("-lbenchmark", "-lpthread"))


def command(stack: str, ranks: int, build_dir: Path, out: Path, timeout: float,
            extra: list[str]) -> tuple[list[str], dict]:
    bench = build_dir / "bench"
    flags = [f"--benchmark_out={out}", "--benchmark_out_format=json", *extra]
    if stack == "inproc":
        env = dict(os.environ, PMB_RANKS=str(ranks))
        return [str(bench / "bench_collectives"), *flags], env
    if stack.startswith("openmpi"):
        cmd, env = launched("mpi", ranks, [str(bench / "bench_mpi_collectives"), *flags],
                            timeout, Path())
        env["PMB_MPI_LABEL"] = stack
        if stack == "openmpi-tcp":
            cmd[1:1] = ["--mca", "btl", "self,tcp"]
        return cmd, env
    if stack == "mpich":
        driver = mpich_driver()
        assert driver is not None, "main() checked"
        env = dict(os.environ, MPIR_CVAR_POLLS_BEFORE_YIELD="1")
        return ["mpiexec.mpich", "-bind-to", "none", "-n", str(ranks), str(driver), *flags], env
    commxrun = build_dir / "tools" / "commxrun" / "commxrun"
    return launched(stack, ranks, [str(program_for(stack, bench, "bench_pmb")), *flags], timeout,
                    commxrun)


def write_mode(path: Path, before: float | None, after: float | None) -> bool:
    """A cache line's crossing before and after, as pmb_report.file_mode reads it; nothing
    (False) where bench_cache_line is missing."""
    if before is None or after is None:
        return False
    path.write_text(f"cache_line_ns {before:.1f} {after:.1f}\n", encoding="utf-8")
    return True


def wait_for_mode(build_dir: Path, mode: str | None, most: float) -> float | None:
    """A cache line's crossing once the VM is in `mode` (polled every few seconds, at most
    `most` seconds; after that, the crossing as it is)."""
    line = cache_line_ns(build_dir)
    until = time.monotonic() + most
    while mode and line is not None and line_mode(line, line) != mode and \
            time.monotonic() < until:
        time.sleep(3)  # the machine's own state, not a peer's: nothing else to wait on
        line = cache_line_ns(build_dir)
    return line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", type=Path, default=Path("build/release"))
    p.add_argument("--results", type=Path, default=Path("results/bench"))
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--stacks", nargs="+", default=STACKS, choices=STACKS)
    p.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    p.add_argument("--filter", help="--benchmark_filter for every run")
    p.add_argument("--mode", choices=["fast", "slow"],
                   help="before each run, wait for the VM's mode (a cache line's crossing)")
    p.add_argument("--mode-wait", type=float, default=600,
                   help="seconds a run waits for --mode at most")
    args = p.parse_args()
    extra = [f"--benchmark_filter={args.filter}"] if args.filter else []
    if "mpich" in args.stacks and mpich_driver() is None:  # said before any round, not in one
        p.error("--stacks mpich needs MPICH's compiler wrapper (apt-get install mpich)")
    failed = 0
    print(f"pmb_sweep: {args.rounds} rounds of {' '.join(args.stacks)} at "
          f"{' '.join(map(str, args.ranks))} ranks; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    for k in range(1, args.rounds + 1):
        folder = args.results / f"round{k}"
        folder.mkdir(parents=True, exist_ok=True)
        line_before = cache_line_ns(args.build_dir)
        for ranks in args.ranks:
            for stack in args.stacks:
                out = folder / f"{stack}-np{ranks}.json"
                cmd, env = command(stack, ranks, args.build_dir, out, args.timeout, extra)
                env["PMB_ROUND"] = str(k)  # which policy runs first at each point turns
                run_line_before = wait_for_mode(args.build_dir, args.mode, args.mode_wait)
                start = time.monotonic()
                try:
                    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True,
                                          timeout=args.timeout)
                    status = "ok" if done.returncode == 0 else \
                        f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
                except subprocess.TimeoutExpired:
                    status = f"timed out after {args.timeout:.0f} s"
                took = time.monotonic() - start
                if status != "ok":
                    failed += 1
                    out.unlink(missing_ok=True)
                run_line_after = cache_line_ns(args.build_dir)
                if status == "ok":
                    # The mode changes within a round as often as not: each run's own.
                    write_mode(out.with_suffix(".mode.txt"), run_line_before, run_line_after)
                print(f"round {k} np{ranks} {stack:<12} {took:7.1f} s  "
                      f"{status}  (load {os.getloadavg()[0]:.2f})", flush=True)
        line_after = cache_line_ns(args.build_dir)
        if write_mode(folder / "mode.txt", line_before, line_after):
            print(f"round {k}: a cache line {line_before:.0f} ns before, {line_after:.0f} after",
                  flush=True)
    print(f"pmb_sweep: done; load average {os.getloadavg()[0]:.2f}; results in {args.results}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
