#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots wan_streams.py's tables (its stdout or --markdown files): Mbit/s versus streams, one
panel per case, wan per message size beside iperf3 with the same streams; what wan's autotune
got, per size, as a dotted level.

  /usr/bin/python3 bench/wan/plot_streams.py out.png capped.txt autotuned_loss.txt
"""

import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(paths):
    """(case, streams or "autotune", iperf3 or None, {size: Mbit/s}) from every table row."""
    sizes = []
    for path in paths:
        with open(path) as f:
            for line in f:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) < 4 or not line.startswith("|") or cells[0] in ("case", "---"):
                    if cells and cells[0] == "case":
                        sizes = [c.replace("wan ", "") for c in cells[3:]]
                    continue
                if not cells[1].isdigit() and cells[1] != "autotune":
                    continue
                values = {}
                for size, cell in zip(sizes, cells[3:]):
                    m = re.match(r"([\d.]+)", cell)
                    if m:
                        values[size] = float(m.group(1))
                streams = int(cells[1]) if cells[1].isdigit() else cells[1]
                yield cells[0], streams, (float(cells[2]) if cells[2] != "-" else None), values


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    data = {}
    autotuned = {}
    for case, streams, iperf, values in rows(paths):
        if streams == "autotune":
            autotuned[case] = values
        else:
            data.setdefault(case, {})[streams] = (iperf, values)
    fig, axes = plt.subplots(1, len(data), figsize=(5 * len(data), 4), squeeze=False)
    for ax, (case, points) in zip(axes[0], data.items()):
        xs = sorted(points)
        ax.plot(xs, [points[x][0] for x in xs], "k--o", label="iperf3")
        for size in sorted({s for x in xs for s in points[x][1]}, key=lambda s: int(s.split()[0])):
            ys = [points[x][1].get(size) for x in xs]
            line = ax.plot(xs, ys, "-o", label=f"wan {size}")[0]
            if size in autotuned.get(case, {}):
                ax.axhline(autotuned[case][size], color=line.get_color(), linestyle=":",
                           label=f"wan {size}, autotune")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_title(case)
        ax.set_xlabel("streams")
        ax.set_ylabel("Mbit/s")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("transport::wan vs iperf3, emulated 1 Gbit/s, 50 ms RTT")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()
