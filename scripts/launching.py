#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How a stack's ranks are started on this machine, as the main job (md_compare.py), the
alpha-beta probe (alpha_beta.py) and the PMB sweep (pmb_sweep.py) all start them:
  inproc           COMMX_INPROC_RANKS=N ./program
  mpi              mpirun -np N --oversubscribe ./program
  mpi_wan          two mpiruns of N/2 ranks, one per site (tests/transport/sites_by_launch.sh)
  anything else    commxrun -n N --timeout T ./program (shm_tcp, shm_ucx on two simulated nodes,
                   shm_tcp_wan on two nodes at two sites)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

RANK_PREFIX = re.compile(r"^\[\d+\] ")  # a launcher's "[rank] " prefix on each output line

# Every stack commx builds, as commx_add_variants, find_package and pkg-config name them, and as
# every script's --stacks takes them.
STACKS = [
    "inproc", "shm", "tcp", "wan", "mpi", "shm_tcp", "shm_tcp_wan", "mpi_wan", "ucx", "shm_ucx"
]


def cache_line_ns(build_dir: Path) -> float | None:
    """One cache line crossing between CPUs 0 and 1 in ns (bench_cache_line), None without it."""
    bench = build_dir / "bench" / "bench_cache_line"
    if not bench.exists():
        return None
    try:
        done = subprocess.run([str(bench), "--benchmark_format=json"], capture_output=True,
                              text=True, timeout=60, check=True)
        runs = json.loads(done.stdout)["benchmarks"]
        return statistics.median(run["half_rtt"] for run in runs) * 1e9
    except (subprocess.SubprocessError, ValueError, KeyError):
        return None


# Between this VM's two modes: a cache line crosses in about 40 ns in one, 200 in the other.
FAST_LINE_NS = 100.0


def line_mode(before: float, after: float) -> str:
    """"fast" (the two vCPUs on one die, a cache line about 40 ns), "slow" (two dies, about
    200) or "mixed" (the mode changed between the two crossings)."""
    if max(before, after) < FAST_LINE_NS:
        return "fast"
    return "slow" if min(before, after) >= FAST_LINE_NS else "mixed"


def vm_mode(before: float | None, after: float | None) -> str:
    """What this VM's mode was around a run, from a cache line's crossing before and after: its
    two vCPUs are on one die (about 40 ns) or on two (about 200)."""
    if before is None or after is None:
        return "the VM's mode not measured (no bench_cache_line)"
    mode = {"fast": "one die", "slow": "two dies", "mixed": "changing"}[line_mode(before, after)]
    return f"the VM's mode: {mode} (a cache line crossed in {before:.0f} ns before, {after:.0f} after)"


def program_for(stack: str, folder: Path, name: str) -> Path:
    """`folder`/`name`_`stack`, or a clear error naming what is missing and why."""
    path = folder / f"{name}_{stack}"
    if stack not in STACKS:
        raise SystemExit(f"{stack} is no commx stack (stacks: {' '.join(STACKS)})")
    if not path.exists():
        raise SystemExit(f"{path} was not built: its stack's target is missing (an MPI, or "
                         f"COMMX_BENCH_EVERY_STACK=OFF, which builds the first stack only)")
    return path


def built_against_mpich(source: Path, libs: tuple[str, ...] = ()) -> Path | None:
    """`source` (one of bench/'s raw-MPI drivers) compiled against MPICH into build/mpich/, once
    per change of it or of bench/'s headers; None when MPICH's compiler wrapper is not installed.
    By hand: the CMake build finds one MPI, Open MPI, and a second one would need a build tree of
    its own."""
    root = Path(__file__).resolve().parent.parent
    out = root / "build" / "mpich" / source.stem
    newest = max(f.stat().st_mtime for f in [source, *source.parent.glob("*.hpp")])
    if out.exists() and out.stat().st_mtime >= newest:
        return out
    if shutil.which("mpicxx.mpich") is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mpicxx.mpich", "-O2", "-DNDEBUG", "-std=c++20", "-DMPICH_SKIP_MPICXX=1",
                    f"-I{root / 'bench'}", str(source), "-o", str(out), *libs], check=True)
    return out


def launched(stack: str, ranks: int, program: list[str], timeout: float,
             commxrun: Path) -> tuple[list[str], dict]:
    """The command and environment that run `program` on `ranks` ranks of `stack`."""
    env = dict(os.environ)
    if stack == "inproc":
        env["COMMX_INPROC_RANKS"] = str(ranks)
        return program, env
    if stack == "mpi":
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        # As the tests run it: no core binding and yielding while idle, since ranks share 2
        # cores with each other (busy-polling ranks would starve one another).
        return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
                "--mca", "mpi_yield_when_idle", "1"] + program, env
    if stack == "mpi_wan" and ranks > 1:
        # Two sites, each its own mpirun, joined over wan (as the tests launch it).
        script = Path(__file__).resolve().parent.parent / "tests" / "transport" / "sites_by_launch.sh"
        return ["bash", str(script), "mpirun", str(ranks)] + program, env
    if stack == "mpi_wan":
        return launched("mpi", ranks, program, timeout, commxrun)
    # The layered stacks on two simulated nodes of this machine (shm_tcp_wan: at two sites).
    places = []
    if ranks > 1 and stack in ("shm_tcp", "shm_ucx"):
        places = ["--nodes", "2"]
    elif ranks > 1 and stack == "shm_tcp_wan":
        places = ["--nodes", "2", "--sites", "2"]
    return [str(commxrun), "-n", str(ranks), *places, "--timeout", str(int(timeout))] + program, env
