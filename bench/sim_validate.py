#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How well a platform modelled on this machine predicts its real PMB times (issue "A simulated
cluster", validation).

platforms/simgrid/this-machine-<stack>.xml gives each rank a host joined to the others so that a
message costs what scripts/alpha_beta.py fitted for the stack on 2 ranks. This runs
bench_sim_collectives_simgrid (every policy; compute skipped unless --compute measured, which
also charges commx's own work between transport calls as it runs under the simulation) on it at the rank counts of a PMB sweep's JSON files and prints, per collective, size
and rank count, the measured time (median over the sweep's rounds of each round's median), the
predicted one, for every policy; then predicted/measured per collective, size and rank count.

    /usr/bin/python3 bench/sim_validate.py --stack shm --pmb results/bench/pmb_rooted [--ranks 2 4]

The sweep must be of the same mode as the fit (bench/README.md says which it used). Bcast is
left out of a sweep whose root stayed fixed (before pmb::next_root): the simulated program turns
its root, as PMB does now.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_scale import human, parse_cell  # noqa: E402

POLICIES = ["flat", "binomial", "ring", "hierarchical", "tuned"]
COLLECTIVES = {"Allreduce": "allreduce", "Allgather": "allgather", "Bcast": "bcast",
               "Barrier": "barrier"}


def measured(pmb: Path, stack: str, ranks: int) -> dict:
    """(collective, bytes, policy) -> median over rounds of the round's median, in us."""
    samples = defaultdict(list)
    for path in sorted(pmb.glob(f"round*/{stack}-np{ranks}.json")):
        for b in json.loads(path.read_text())["benchmarks"]:
            if not b["name"].endswith("manual_time_median"):
                continue
            family, program, _, size = b["name"].split("/")[:4]
            policy = program.rsplit("-", 1)[-1]
            if family in COLLECTIVES and policy in POLICIES:
                samples[(COLLECTIVES[family], int(size), policy)].append(b["real_time"])
    return {k: statistics.median(v) for k, v in samples.items()}


def predicted(build: Path, platform: Path, ranks: int, policy: str, collectives, sizes,
              compute: str, calls: int) -> dict:
    env = dict(os.environ, COMMX_SIMGRID_RANKS=str(ranks), COMMX_SIMGRID_PLATFORM=str(platform),
               COMMX_SIMGRID_COMPUTE=compute)
    env.pop("COMMX_SIMGRID_CONFIG", None)
    out = subprocess.run([str(build / "bench/bench_sim_collectives_simgrid"), policy,
                          "--collectives", ",".join(collectives),
                          "--sizes", ",".join(str(s) for s in sizes if s > 0),
                          "--calls", str(calls)],
                         env=env, capture_output=True, text=True, timeout=600, check=True)
    cells = [c for c in map(parse_cell, out.stdout.splitlines()) if c and "us" in c]
    return {(c["collective"], c["bytes"], policy): c["us"] for c in cells}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", choices=["shm", "tcp"], required=True)
    ap.add_argument("--pmb", type=Path, required=True, help="a sweep's directory (round*/)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--without-bcast", action="store_true", help="the sweep's root was fixed")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--compute", choices=["skip", "measured"], default="skip",
                    help="COMMX_SIMGRID_COMPUTE for the simulated runs")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build/release")
    args = ap.parse_args()
    platform = ROOT / f"platforms/simgrid/this-machine-{args.stack}.xml"
    rows, errors = [], defaultdict(list)
    for ranks in args.ranks:
        real = measured(args.pmb, args.stack, ranks)
        if not real:
            raise SystemExit(f"sim_validate: no {args.stack}-np{ranks}.json under {args.pmb}")
        collectives = sorted({k[0] for k in real} - ({"bcast"} if args.without_bcast else set()))
        sizes = sorted({k[1] for k in real})
        model = {}
        for policy in POLICIES:
            model.update(predicted(args.build_dir, platform, ranks, policy, collectives, sizes,
                                   args.compute, args.calls))
        for (collective, size, policy), us in sorted(real.items()):
            sim = model.get((collective, size, policy))
            if collective not in collectives or sim is None:
                continue
            rows.append((collective, size, ranks, policy, us, sim))
            errors[(collective, size, ranks)].append(sim / us)
    print(f"### {args.stack}: predicted (this-machine-{args.stack}.xml) against measured "
          f"({args.pmb}), us per call\n")
    print("| collective | size | ranks | " + " | ".join(f"{p} real / sim" for p in POLICIES)
          + " |")
    print("|---|---|---:|" + "---:|" * len(POLICIES))
    by = {(c, s, r, p): (u, m) for c, s, r, p, u, m in rows}
    for c, s, r in sorted({(c, s, r) for c, s, r, *_ in rows}):
        cells = []
        for p in POLICIES:
            u, m = by.get((c, s, r, p), (None, None))
            cells.append("-" if u is None else f"{u:.2f} / {m:.2f}")
        print(f"| {c} | {human(s) if c != 'barrier' else '-'} | {r} | " + " | ".join(cells) + " |")
    print("\nPredicted over measured, median over the policies (1 = exact):\n")
    counts = sorted({r for _, _, r in errors})
    print("| collective | size | " + " | ".join(f"{r} ranks" for r in counts) + " |")
    print("|---|---|" + "---:|" * len(counts))
    for c, s in sorted({(c, s) for c, s, _ in errors}):
        cells = [f"{statistics.median(errors[(c, s, r)]):.2f}" if (c, s, r) in errors else "-"
                 for r in counts]
        print(f"| {c} | {human(s) if c != 'barrier' else '-'} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
