#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Nonblocking allreduce overlap, every stack and policy beside raw MPI, in interleaved rounds.

Runs bench_nbc_overlap_<stack>_<policy> (commxrun or mpirun, 2 ranks) and
bench_mpi_nbc_overlap (Open MPI, vader) once per round each, in turn, and prints per target
and size the medians over rounds: blocking time, start-and-wait time and its ratio to the
blocking one, and the overlap with silent and with testing computation.

    python3 bench/nbc_overlap.py --build build/release --rounds 5
"""
import argparse
import collections
import os
import statistics
import subprocess

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
          "-np", "2"]


def command(build, target):
    exe = os.path.join(build, "bench", target)
    if target == "bench_mpi_nbc_overlap" or "_mpi_" in target:
        return MPIRUN + [exe, "1"]
    return [os.path.join(build, "tools", "commxrun", "commxrun"), "-n", "2", exe, "1"]


def run(build, target):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(command(build, target), capture_output=True, text=True, env=env,
                         timeout=600, check=True).stdout
    rows = []
    for line in out.splitlines():
        fields = line.replace("[0]", "").split()
        if len(fields) == 6 and fields[1].isdigit():
            rows.append((int(fields[1]), [float(x) for x in fields[2:]]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bench = os.path.join(args.build, "bench")
    targets = sorted(t for t in os.listdir(bench) if t.startswith("bench_nbc_overlap_"))
    targets.append("bench_mpi_nbc_overlap")
    seen = collections.defaultdict(list)
    for _ in range(args.rounds):
        for target in targets:
            for size, values in run(args.build, target):
                seen[(target, size)].append(values)
    print(f"{'target':<34} {'bytes':>8} {'pure_us':>9} {'start+wait_us':>13} {'ratio':>6} "
          f"{'silent%':>8} {'testing%':>9}")
    for (target, size), rows in sorted(seen.items()):
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"{target:<34} {size:>8} {med[0]:>9.2f} {med[1]:>13.2f} {med[1] / med[0]:>6.2f} "
              f"{med[2]:>8.0f} {med[3]:>9.0f}")


if __name__ == "__main__":
    main()
