#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws an nbody_wide run: the time split per step (--csv), like seed 004's Fig. 4, and the
particles at the end projected along z (--snapshot), as PNGs; the density's title says how
clumped the particles are (the mass in the densest 1% of cells), and --least-clumped fails a
picture in which gravity has not gathered them.

  examples/nbody_wide/plot.py --csv steps.csv --split split.png \\
      --snapshot end.bin --density density.png [--title "two sites, 50 ms RTT"]
"""

import argparse
import csv
import struct
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HEADER = struct.Struct("<8sIIddQQ")  # snapshot.hpp: magic, version, record bytes, box, time, n, hash


def read_snapshot(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER.size:
        sys.exit(f"{path}: shorter than a snapshot header")
    magic, version, record, box, time, count, _ = HEADER.unpack_from(data)
    if magic != b"NBODYSNP" or version != 1 or record != 64:
        sys.exit(f"{path}: not an nbody_wide snapshot (version 1, 64-byte particles)")
    if len(data) != HEADER.size + count * record:
        sys.exit(f"{path}: {len(data)} bytes, not {count} particles")
    particles = np.frombuffer(data, dtype=np.float64, offset=HEADER.size).reshape(count, 8)
    return box, time, particles  # columns: id (bits), mass, x, y, z, vx, vy, vz


def draw_split(rows, out, title):
    steps = [int(r["step"]) for r in rows]
    parts = [("compute_seconds", "calculation", "#4c72b0"),
             ("local_seconds", "communication in a site", "#55a868"),
             ("wide_seconds", "wide-area communication", "#c44e52")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = np.zeros(len(rows))
    for key, label, colour in parts:
        ms = np.array([1e3 * float(r[key]) for r in rows])
        ax.bar(steps, ms, bottom=bottom, label=label, color=colour, width=0.9)
        bottom += ms
    ax.plot(steps, [1e3 * float(r["step_seconds"]) for r in rows], "k.", markersize=3,
            label="step (slowest rank)")
    ax.set_xlabel("step")
    ax.set_ylabel("time per step, ms (mean over ranks)")
    ax.set_title(title or "nbody_wide: where each step's time went")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def clumped_fraction(particles, box, cells=32):
    """The mass in the densest 1% of a cells^3 grid: about 1% for an even spread of many
    particles a cell (a lattice, however perturbed; more where cells hold few: 8% for 16^3
    particles), much more once gravity has gathered them into halos."""
    grid, _ = np.histogramdd(particles[:, 2:5], bins=cells, range=[[0, box]] * 3,
                             weights=particles[:, 1])
    ordered = np.sort(grid.ravel())[::-1]
    return ordered[: max(1, ordered.size // 100)].sum() / ordered.sum()


def draw_density(snapshot, out, title):
    box, time, p = read_snapshot(snapshot)
    if len(p) == 0:
        sys.exit(f"{snapshot}: no particles to draw")
    grid, _, _ = np.histogram2d(p[:, 2], p[:, 3], bins=256, range=[[0, box], [0, box]],
                                weights=p[:, 1])
    fig, ax = plt.subplots(figsize=(6.5, 6.8))
    floor = grid[grid > 0].min() / 10
    ax.imshow(np.log10(grid.T + floor), origin="lower", extent=[0, box, 0, box], cmap="magma")
    ax.set_xlabel("x (box lengths)")
    ax.set_ylabel("y (box lengths)")
    clumped = clumped_fraction(p, box)
    heading = title or "nbody_wide"
    ax.set_title(f"{heading}\n{len(p)} particles at t = {time:g} (G = 1, mass 1, box 1); "
                 f"projected density, log scale\nthe densest 1% of 32^3 cells hold "
                 f"{100 * clumped:.0f}% of the mass", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return clumped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv")
    parser.add_argument("--split", help="PNG of the time split per step (needs --csv)")
    parser.add_argument("--snapshot")
    parser.add_argument("--density", help="PNG of the projected density (needs --snapshot)")
    parser.add_argument("--title")
    parser.add_argument("--least-clumped", type=float,
                        help="fail unless the densest 1%% of cells hold this fraction of the mass")
    args = parser.parse_args()
    if args.split:
        if not args.csv:
            sys.exit("--split needs --csv")
        with open(args.csv) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"{args.csv}: no steps")
        draw_split(rows, args.split, args.title)
    if args.density:
        if not args.snapshot:
            sys.exit("--density needs --snapshot")
        clumped = draw_density(args.snapshot, args.density, args.title)
        print(f"{args.density}: the densest 1% of cells hold {100 * clumped:.1f}% of the mass")
        if args.least_clumped is not None and clumped < args.least_clumped:
            sys.exit(f"{args.snapshot}: the densest 1% of cells hold {100 * clumped:.1f}% of the "
                     f"mass, under the {100 * args.least_clumped:.0f}% asked for: no structure "
                     "formed")


if __name__ == "__main__":
    main()
