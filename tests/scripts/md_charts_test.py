# SPDX-License-Identifier: MIT
"""scripts/md_compare.py's charts, drawn from a saved table of the main job (8 stacks, 7
policies, 1, 2 and 4 ranks): each answers its question with every label legible at the PNG's
own size, no two labels of a panel overlapping, none cut off, none under 8 points."""

import csv
import sys
import tempfile
import unittest
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import md_compare  # noqa: E402

SAVED = Path(__file__).resolve().parent / "data" / "md_comparison.csv"


def saved_rows() -> list[dict]:
    rows = list(csv.DictReader(SAVED.open()))
    for row in rows:
        row["ranks"] = int(row["ranks"])
        for key in ("time_per_step_ms", "vs_mpi"):
            row[key] = float(row[key]) if row[key] else None
    return rows


def texts(fig):
    """Every visible text of the figure with its box in pixels, once drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    # Tick labels of ticks outside an axis's limits are kept by matplotlib but never drawn.
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    undrawn.add(id(tick.label1))
    found = []
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_visible() and text.get_text().strip() and id(text) not in undrawn:
            found.append((text, text.get_window_extent(renderer)))
    return found


class Legible(unittest.TestCase):
    def check(self, fig, expect_labels):
        found = texts(fig)
        shown = {t.get_text() for t, _ in found}
        for label in expect_labels:  # a panel's title may go on after its rank count
            self.assertTrue(any(t == label or t.startswith(label + " (") for t in shown), label)
        width, height = fig.canvas.get_width_height()
        for text, box in found:
            self.assertGreaterEqual(text.get_fontsize(), 8, text.get_text())
            self.assertTrue(box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1
                            and box.y1 <= height + 1, f"'{text.get_text()}' is cut off")
        # Tick labels of one axis must not run into each other.
        for ax in fig.axes:
            for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
                boxes = [(t.get_text(), b) for t, b in found if t in ticks]
                for i, (a, box_a) in enumerate(boxes):
                    for b, box_b in boxes[i + 1:]:
                        self.assertFalse(box_a.overlaps(box_b), f"'{a}' overlaps '{b}'")

    def test_stacks_figure(self):
        rows = saved_rows()
        fig = md_compare.stacks_figure(rows, 32000, plt)
        stacks = {r["stack"] for r in rows if r["policy"] != "raw"}
        self.assertEqual(len(fig.axes), 3)  # a panel per rank count
        self.check(fig, stacks | {"1 rank"})
        plt.close(fig)

    def test_policies_figure(self):
        rows = saved_rows()
        fig = md_compare.policies_figure(rows, 32000, plt)
        policies = {r["policy"] for r in rows if r["policy"] != "raw"}
        self.check(fig, policies | {"2 ranks", "4 ranks"})
        plt.close(fig)

    def test_written_as_pngs(self):
        with tempfile.TemporaryDirectory() as folder:
            made = md_compare.write_charts(saved_rows(), Path(folder), 32000)
            self.assertEqual(len(made), 2, made)
            for name in ("comparison.png", "policies.png"):
                self.assertGreater((Path(folder) / name).stat().st_size, 10_000)

    def test_the_old_chart_would_fail(self):
        """The check catches what the issue saw: eight stack names under a narrow panel."""
        fig, ax = plt.subplots(figsize=(3.2, 3.8))
        names = sorted({r["stack"] for r in saved_rows()})
        ax.bar(range(len(names)), [1] * len(names))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        with self.assertRaises(AssertionError):
            self.check(fig, names)
        plt.close(fig)


if __name__ == "__main__":
    unittest.main()
