#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The main job's N-body part: examples/nbody_wide in each arrangement, one table.

Runs the same problem (a perturbed lattice, --lattice N per side, default 48, for --steps
steps, default 10) as one job of 4 ranks over shm, tcp and mpi; as two sites of 2 ranks in one
communicator (shm+tcp+wan on this machine, no link emulation); and, as root, as CosmoGrid ran:
each site its own job (shm or mpi inside), the leaders joined over wanemu's emulated link
(25 ms each way, 1 Gbit/s) through a commx-relay per site (examples/nbody_wide/two_sites.py).
Prints one row per arrangement (time per step, its split into calculation / communication in
a site / wide-area communication, the slowdown against the one-job shm run, and whether it
ended with the same particles), and writes results/nbody/comparison.csv, comparison.png (the split per
arrangement), split_<two-site run>.png (per step, like seed 004's Fig. 4) and density.png.

The table's 10 steps (t = 0.1) are too short for gravity to show: density.png comes from a run
of its own, the same program and problem kind (a perturbed lattice at rest, total mass 1 in a
unit box, G = 1: free-fall time about 0.5) on fewer particles (--picture-lattice, default 32)
for longer (--picture-steps of --picture-dt: t = 1.5 by default), in which the particles
gather into halos along filaments; it fails when they have not (plot.py --least-clumped).
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OMPI = ["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
        "self,vader", "--mca", "mpi_yield_when_idle", "1"]
OMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def arrangements(build, root):
    programs = build / "examples" / "nbody_wide"
    commxrun = str(build / "tools" / "commxrun" / "commxrun")
    two_sites = [sys.executable, str(ROOT / "examples" / "nbody_wide" / "two_sites.py"),
                 "--build", str(build), "--timeout", "900"]
    runs = [
        ("one job, shm", "shm", [commxrun, "-n", "4", str(programs / "nbody_wide_shm")]),
        ("one job, tcp", "tcp", [commxrun, "-n", "4", str(programs / "nbody_wide_tcp")]),
        ("one job, mpi (Open MPI)", "mpi", OMPI + [str(programs / "nbody_wide_mpi")]),
        ("one job, ucx", "ucx", [commxrun, "-n", "4", str(programs / "nbody_wide_ucx")]),
        ("2 nodes, one job, shm+ucx", "shm_ucx",
         [commxrun, "-n", "4", "--nodes", "2", str(programs / "nbody_wide_shm_ucx")]),
        ("2 sites, one communicator, shm+tcp+wan (no emulation)", "shm_tcp_wan",
         [commxrun, "-n", "4", "--nodes", "2", "--sites", "2",
          str(programs / "nbody_wide_shm_tcp_wan")]),
    ]
    if root:
        runs += [
            ("2 sites as jobs, shm inside, 50 ms RTT + relays", "shm",
             two_sites + ["--stack", "shm", "--"]),
            ("2 sites as jobs, mpi inside, 50 ms RTT + relays", "mpi",
             two_sites + ["--stack", "mpi", "--launcher", "mpirun", "--"]),
        ]
    has_mpirun = shutil.which("mpirun") is not None
    return [(name, stack, command) for name, stack, command in runs
            if (programs / f"nbody_wide_{stack}").exists()
            and (has_mpirun or "mpirun" not in command and "mpi" not in stack)]


def result_of(output):
    fields, fingerprint = None, None
    for line in output.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
        if line.startswith("nbody result:"):
            fields = dict(f.split("=", 1) for f in line.split()[2:])
        elif line.startswith("final state fingerprint:"):
            fingerprint = line.split()[-1]
    return fields, fingerprint


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=ROOT / "build" / "release")
    p.add_argument("--results", type=Path, default=ROOT / "results" / "nbody")
    p.add_argument("--lattice", type=int, default=48)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--picture-lattice", type=int, default=32)
    p.add_argument("--picture-steps", type=int, default=150)
    p.add_argument("--picture-dt", type=float, default=0.01)
    args = p.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    root = os.geteuid() == 0
    problem = ["--lattice", str(args.lattice), "--steps", str(args.steps)]
    rows = []
    for i, (name, stack, command) in enumerate(arrangements(args.build_dir, root)):
        slug = f"run{i}"
        extra = ["--csv", str(args.results / f"{slug}.csv")]
        env = dict(os.environ, **OMPI_ENV)
        print(f"=== {name}", flush=True)
        proc = subprocess.run(command + problem + extra, capture_output=True, text=True,
                              env=env, timeout=1800)
        fields, fingerprint = result_of(proc.stdout)
        if proc.returncode != 0 or fields is None:
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            print(f"nbody_compare: {name} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        rows.append({**fields, "arrangement": name, "csv": slug, "fingerprint": fingerprint})
    if not root:
        print("(not root: the runs with each site its own job over the emulated link need "
              "network namespaces and were left out)")
    base = float(rows[0]["step_ms"])
    same = all(r["fingerprint"] == rows[0]["fingerprint"] for r in rows)
    header = (f"{'arrangement':<52} {'ranks':>5} {'sites':>5} {'step ms':>9} {'compute':>8} "
              f"{'local':>7} {'wide':>7} {'wide %':>6} {'vs shm':>6}  same particles")
    print(f"\nnbody_wide: {rows[0]['particles']} particles (lattice {args.lattice}^3), "
          f"{args.steps} steps, mean per step over steps 1-{args.steps}; times are the ranks' "
          f"means")
    print(header)
    for r in rows:
        r["vs_one_job_shm"] = float(r["step_ms"]) / base
        print(f"{r['arrangement']:<52} {r['ranks']:>5} {r['sites']:>5} "
              f"{float(r['step_ms']):>9.1f} {float(r['compute_ms']):>8.1f} "
              f"{float(r['local_ms']):>7.1f} {float(r['wide_ms']):>7.1f} "
              f"{100 * float(r['wide_fraction']):>6.1f} {r['vs_one_job_shm']:>6.2f}  "
              f"{'yes' if r['fingerprint'] == rows[0]['fingerprint'] else 'NO'}")
    print(f"every arrangement ended with the same particles: {'yes' if same else 'NO'}")
    with open(args.results / "comparison.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)

    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    names = [r["arrangement"] for r in rows]
    left = [0.0] * len(rows)
    for key, label, colour in [("compute_ms", "calculation", "#4c72b0"),
                               ("local_ms", "in a site", "#55a868"),
                               ("wide_ms", "wide area", "#c44e52")]:
        values = [float(r[key]) for r in rows]
        ax.barh(names, values, left=left, label=label, color=colour)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (mean over ranks)")
    ax.set_title(f"nbody_wide, {rows[0]['particles']} particles, 4 ranks")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.results / "comparison.png", dpi=120)

    plot = [sys.executable, str(ROOT / "examples" / "nbody_wide" / "plot.py")]
    wide = [r for r in rows if "RTT" in r["arrangement"]] or rows[-1:]
    subprocess.run(plot + ["--csv", str(args.results / f"{wide[0]['csv']}.csv"), "--split",
                           str(args.results / "split_two_sites.png"), "--title",
                           f"nbody_wide: {wide[0]['arrangement']}"], check=True)
    # The picture's own run: long enough for structure to form (see the file comment).
    name, _, command = arrangements(args.build_dir, root)[0]
    picture = ["--lattice", str(args.picture_lattice), "--steps", str(args.picture_steps),
               "--dt", str(args.picture_dt), "--snapshot", str(args.results / "end.bin")]
    print(f"=== the density picture: {name}, {args.picture_lattice}^3 particles, "
          f"{args.picture_steps} steps of {args.picture_dt}", flush=True)
    proc = subprocess.run(command + picture, capture_output=True, text=True,
                          env=dict(os.environ, **OMPI_ENV), timeout=1800)
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        print(f"nbody_compare: the picture's run failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    subprocess.run(plot + ["--snapshot", str(args.results / "end.bin"), "--density",
                           str(args.results / "density.png"), "--least-clumped", "0.2",
                           "--title", f"nbody_wide, {name}, 4 ranks: a perturbed lattice at "
                           f"rest after {args.picture_steps} steps"], check=True)
    print(f"wrote {args.results}/comparison.csv, comparison.png, split_two_sites.png, "
          f"density.png")
    return 0 if same else 3


if __name__ == "__main__":
    sys.exit(main())
