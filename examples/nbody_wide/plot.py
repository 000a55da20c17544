#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws an nbody_wide run: the time split per step (--csv), like seed 004's Fig. 4, and the
particles at the end projected along z (--snapshot), as PNGs.

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


def draw_density(snapshot, out, title):
    box, time, p = read_snapshot(snapshot)
    if len(p) == 0:
        sys.exit(f"{snapshot}: no particles to draw")
    grid, _, _ = np.histogram2d(p[:, 2], p[:, 3], bins=256, range=[[0, box], [0, box]],
                                weights=p[:, 1])
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.imshow(np.log10(grid.T + grid[grid > 0].min() / 10), origin="lower",
              extent=[0, box, 0, box], cmap="magma")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title or f"projected density at t = {time:g} ({len(p)} particles, log scale)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv")
    parser.add_argument("--split", help="PNG of the time split per step (needs --csv)")
    parser.add_argument("--snapshot")
    parser.add_argument("--density", help="PNG of the projected density (needs --snapshot)")
    parser.add_argument("--title")
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
        draw_density(args.snapshot, args.density, None)


if __name__ == "__main__":
    main()
