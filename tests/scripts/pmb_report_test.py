# SPDX-License-Identifier: MIT
"""scripts/pmb_report.py: its ratios are taken round by round, so a machine that changes speed
between rounds does not set one policy's slow rounds against another's fast ones, and the
goal counts under each table follow them."""

import contextlib
import io
import json
import shutil
import statistics
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from pmb_report import RING_BCAST_BYTES, RING_BCAST_RANKS, by_round, main  # noqa: E402
from pmb_report import median_interval, only_mode, stack_table  # noqa: E402


def write(folder: Path, times: dict) -> Path:
    """times: (bench, label, np, bytes) -> microseconds, as one Google Benchmark JSON file."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = [{"run_name": f"{bench}/{label}/np{np_}/{size}/iterations:1/repeats:3/manual_time",
             "aggregate_name": "median", "real_time": us, "time_unit": "us"}
            for (bench, label, np_, size), us in times.items()]
    path = folder / "shm-np2.json"
    path.write_text(json.dumps({"benchmarks": runs}))
    return path


def median(paths, point) -> float:
    """A point's median over the rounds, as the table's time columns give it."""
    return statistics.median(by_round(paths)[point].values())


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def sweep(self, rounds):
        """rounds: per round, (flat, tuned, openmpi) microseconds for Barrier at 2 ranks."""
        return [write(self.root / f"round{k}", {
            ("Barrier", "commx-shm-flat", 2, 0): flat,
            ("Barrier", "commx-shm-tuned", 2, 0): tuned,
            ("Barrier", "openmpi", 2, 0): mpi,
        }) for k, (flat, tuned, mpi) in enumerate(rounds, start=1)]

    def table(self, paths):
        return stack_table("shm", by_round(paths))

    def test_ratios_are_taken_within_each_round(self):
        # A fast mode (0.13) and a slow one (0.6): tuned meets the slow mode once more than
        # flat, so their medians over the rounds differ 4.6x, yet in two rounds of three tuned
        # takes flat's time, and flat is below Open MPI's in all three.
        paths = self.sweep([(0.13, 0.13, 0.14), (0.13, 0.6, 0.62), (0.6, 0.6, 0.62)])
        self.assertAlmostEqual(median(paths, ("Barrier", "commx-shm-tuned", 2, 0)), 0.6)
        self.assertAlmostEqual(median(paths, ("Barrier", "commx-shm-flat", 2, 0)), 0.13)
        lines = self.table(paths)
        row = next(line.split() for line in lines if line.lstrip().startswith("Barrier"))
        self.assertEqual(row[-2:], ["0.93", "1.00"])  # tuned/best was 4.6 from the medians
        self.assertIn("np2: best at or below openmpi at 1 of 1 points, "
                      "tuned within 10% of the best at 1 of 1", lines)

    def test_a_slower_tuned_and_a_slower_policy_count_as_misses(self):
        paths = self.sweep([(0.20, 0.30, 0.10), (0.22, 0.33, 0.11), (0.21, 0.31, 0.10)])
        lines = self.table(paths)
        row = next(line.split() for line in lines if line.lstrip().startswith("Barrier"))
        self.assertEqual(row[-2:], ["2.00", "1.50"])
        self.assertIn("np2: best at or below openmpi at 0 of 1 points, "
                      "tuned within 10% of the best at 0 of 1", lines)

    def test_the_median_interval_is_the_sign_tests(self):
        # 25 values: x(8) and x(18), as the tables of the sign test give for 95%; 9: x(2), x(8);
        # 5 values cannot cover 95% (the widest pair, x(1) and x(5), covers 93.75%).
        self.assertEqual(median_interval(list(range(1, 26))), (8, 18))
        self.assertEqual(median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5]), (2, 8))
        self.assertIsNone(median_interval([1, 2, 3, 4, 5]))
        self.assertEqual(median_interval([1, 2, 3, 4, 5, 6]), (1, 6))

    def test_a_miss_inside_the_noise_is_counted_apart(self):
        # flat over Open MPI: a median of 1.02 over 9 rounds whose 95% interval (0.97-1.05)
        # reaches 1: within the noise. Then every round 1.2x or more: a miss.
        ratios = [0.95, 0.97, 0.99, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06]
        lines = self.table(self.sweep([(r, r, 1.0) for r in ratios]))
        row = next(line.split() for line in lines if line.lstrip().startswith("Barrier"))
        self.assertEqual(row[-2:], ["1.02", "1.00"])
        self.assertIn("np2: best at or below openmpi at 0 of 1 points (1 more within the noise), "
                      "tuned within 10% of the best at 1 of 1", lines)
        for old in self.root.iterdir():
            shutil.rmtree(old)
        lines = self.table(self.sweep([(1.2 + r / 10, 1.2 + r / 10, 1.0) for r in ratios]))
        self.assertIn("np2: best at or below openmpi at 0 of 1 points, "
                      "tuned within 10% of the best at 1 of 1", lines)

    def test_tuned_is_held_against_what_it_chooses_from(self):
        # On mpi, MPI's own collectives (native) win; tuned never picks them (they block past
        # deadlines), so tuned is held against binomial, and native counts for best/openmpi.
        paths = [write(self.root / f"round{k}", {
            ("Allgather", "commx-mpi-binomial", 2, 65536): 20.0,
            ("Allgather", "commx-mpi-tuned", 2, 65536): 21.0,
            ("Allgather", "commx-mpi-native", 2, 65536): 8.0,
            ("Allgather", "openmpi", 2, 65536): 8.0,
        }) for k in range(3)]
        lines = stack_table("mpi", by_round(paths))
        row = next(line.split() for line in lines if line.lstrip().startswith("Allgather"))
        self.assertEqual(row[-2:], ["1.00", "1.05"])

    def test_a_policy_running_binomials_code_is_not_a_second_best(self):
        # ring's barrier is binomial's dissemination: its faster copy by noise (0.9 against
        # 1.0) must not become the best policy, nor what tuned (on binomial) is held against.
        # From 64 KiB at 4 ranks ring's bcast is its own and may be the best; its allreduce
        # from as many doubles as ranks.
        paths = [write(self.root / f"round{k}", {
            ("Barrier", "commx-shm-binomial", 4, 0): 1.0,
            ("Barrier", "commx-shm-ring", 4, 0): 0.9,
            ("Barrier", "commx-shm-tuned", 4, 0): 1.0,
            ("Barrier", "openmpi", 4, 0): 0.95,
            ("Bcast", "commx-shm-binomial", 4, 65536): 20.0,
            ("Bcast", "commx-shm-ring", 4, 65536): 10.0,
            ("Bcast", "commx-shm-tuned", 4, 65536): 20.0,
            ("Bcast", "openmpi", 4, 65536): 12.0,
            ("Bcast", "commx-shm-binomial", 2, 65536): 20.0,
            ("Bcast", "commx-shm-ring", 2, 65536): 10.0,  # 2 ranks: binomial's tree again
            ("Bcast", "commx-shm-tuned", 2, 65536): 20.0,
            ("Bcast", "openmpi", 2, 65536): 20.0,
            # One double: ring's allreduce is binomial's; 128 doubles: its own.
            ("Allreduce", "commx-shm-binomial", 4, 8): 1.0,
            ("Allreduce", "commx-shm-ring", 4, 8): 0.9,
            ("Allreduce", "commx-shm-tuned", 4, 8): 1.0,
            ("Allreduce", "openmpi", 4, 8): 1.0,
            ("Allreduce", "commx-shm-binomial", 4, 1024): 2.0,
            ("Allreduce", "commx-shm-ring", 4, 1024): 1.0,
            ("Allreduce", "commx-shm-tuned", 4, 1024): 2.0,
            ("Allreduce", "openmpi", 4, 1024): 2.0,
        }) for k in range(3)]
        rows = {(line.split()[0], line.split()[1]): line.split()[-2:]
                for line in self.table(paths) if line.lstrip().startswith(("Barrier", "Bcast"))}
        self.assertEqual(rows[("Barrier", "4")], ["1.05", "1.00"])
        self.assertEqual(rows[("Bcast", "4")], ["0.83", "2.00"])
        self.assertEqual(rows[("Bcast", "2")], ["1.00", "1.00"])
        allreduce = [line.split() for line in self.table(paths)
                     if line.lstrip().startswith("Allreduce")]
        self.assertEqual([row[-2:] for row in allreduce], [["1.00", "1.00"], ["0.50", "2.00"]])

    def test_what_ring_inherits_is_what_the_library_says(self):
        header = (Path(__file__).resolve().parents[2] / "include" / "commx" / "coll" / "detail" /
                  "cost_model.hpp").read_text()
        self.assertIn("scatter_allgather_bcast_bytes = std::size_t{64} << 10;", header)
        self.assertEqual(RING_BCAST_BYTES, 64 << 10)
        ring = (Path(__file__).resolve().parents[2] / "include" / "commx" / "coll" /
                "ring.hpp").read_text()
        self.assertIn(f"size < {RING_BCAST_RANKS} ||", ring)
        # inherited(): ring's allreduce of fewer elements than ranks is binomial's.
        self.assertIn("if (data.size() < index(p.size())) return binomial::allreduce(p, data, op);",
                      ring)

    def test_goals_are_counted_again_per_mode_of_the_vm(self):
        # Rounds 1 and 3 fast (a cache line 40 ns before and after), 2 slow, 4 changing mode
        # halfway: flat beats Open MPI in the fast rounds only.
        paths = self.sweep([(0.10, 0.10, 0.12), (0.70, 0.70, 0.60), (0.11, 0.11, 0.12),
                            (0.40, 0.40, 0.30)])
        for k, (before, after) in enumerate([(40, 42), (201, 195), (38, 41), (40, 210)], 1):
            (self.root / f"round{k}" / "mode.txt").write_text(f"cache_line_ns {before} {after}\n")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            main([str(p) for p in paths])
        lines = printed.getvalue().splitlines()
        self.assertIn("rounds by the VM's mode (a cache line before and after): round1 fast, "
                      "round2 slow, round3 fast, round4 mixed", lines)
        self.assertIn("  fast runs only: np2: best at or below openmpi at 1 of 1 points, "
                      "tuned within 10% of the best at 1 of 1", lines)
        self.assertIn("  slow runs only: np2: best at or below openmpi at 0 of 1 points, "
                      "tuned within 10% of the best at 1 of 1", lines)

    def test_a_run_of_its_own_mode_counts_in_that_mode(self):
        # Round 3 changed mode, but its runs (their own mode.txt) all met the fast mode, where
        # flat lost to Open MPI: with it, flat's fast rounds are 0.83x, 1.08x and 1.33x.
        paths = self.sweep([(0.10, 0.10, 0.12), (0.13, 0.13, 0.12), (0.40, 0.40, 0.30)])
        for k, (before, after) in enumerate([(40, 42), (38, 41), (40, 210)], 1):
            (self.root / f"round{k}" / "mode.txt").write_text(f"cache_line_ns {before} {after}\n")
        fast = only_mode(by_round(paths), "fast")
        self.assertEqual(len(fast[("Barrier", "openmpi", 2, 0)]), 2)
        for run in ("shm-np2", "openmpi-np2"):
            (self.root / "round3" / f"{run}.mode.txt").write_text("cache_line_ns 41 44\n")
        fast = only_mode(by_round(paths), "fast")
        self.assertEqual(len(fast[("Barrier", "openmpi", 2, 0)]), 3)
        self.assertIn("np2: best at or below openmpi at 0 of 1 points, tuned within 10% of the "
                      "best at 1 of 1", stack_table("shm", fast))
        self.assertEqual(only_mode(by_round(paths), "slow"), {})

    def test_files_of_one_folder_are_rounds_of_their_own(self):
        folder = self.root / "flat"
        paths = []
        for k, us in enumerate([1.0, 2.0, 9.0]):
            path = write(folder, {("Bcast", "commx-shm-flat", 2, 8): us})
            paths.append(path.rename(folder / f"run{k}.json"))
        self.assertEqual(len(by_round(paths)[("Bcast", "commx-shm-flat", 2, 8)]), 3)
        self.assertAlmostEqual(median(paths, ("Bcast", "commx-shm-flat", 2, 8)), 2.0)


if __name__ == "__main__":
    unittest.main()
