# SPDX-License-Identifier: MIT
"""scripts/tune_collectives.py: a stack's table comes from that stack's runs only, each policy
rated against the fastest within each round, with hysteresis against near-ties, and as a header
named for the stack."""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from tune_collectives import first_buckets, header, kept_rules, load, rules  # noqa: E402


def write_round(folder: Path, name: str, times: dict) -> Path:
    """times: (bench, label, np, bytes) -> microseconds, as a Google Benchmark JSON file."""
    runs = [{"run_name": f"{bench}/{label}/np{np_}/{size}/iterations:1/repeats:3/manual_time",
             "aggregate_name": "median", "real_time": us, "time_unit": "us"}
            for (bench, label, np_, size), us in times.items()]
    path = folder / name
    path.write_text(json.dumps({"benchmarks": runs}))
    return path


class TuneTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.folder = Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def rounds(self, ring_at_1mib):
        """Three rounds on shm and one on tcp; on shm binomial is fastest at 8 B and ring at
        1 MiB wins or loses by round, as `ring_at_1mib` says."""
        paths = []
        for k, ring in enumerate(ring_at_1mib):
            paths.append(write_round(self.folder, f"shm{k}.json", {
                ("Allreduce", "commx-shm-binomial", 4, 8): 1.0,
                ("Allreduce", "commx-shm-flat", 4, 8): 2.0,
                ("Allreduce", "commx-shm-ring", 4, 8): 3.0,
                ("Allreduce", "commx-shm-binomial", 4, 1048576): 100.0,
                ("Allreduce", "commx-shm-flat", 4, 1048576): 300.0,
                ("Allreduce", "commx-shm-ring", 4, 1048576): ring,
                ("Allreduce", "openmpi", 4, 8): 0.1,  # not a commx policy: ignored
            }))
        # Another stack where flat wins everywhere: must not leak into shm's table.
        paths.append(write_round(self.folder, "tcp.json", {
            ("Allreduce", "commx-tcp-flat", 4, 8): 0.5,
            ("Allreduce", "commx-tcp-binomial", 4, 8): 9.0,
        }))
        return paths

    def test_median_over_rounds_picks_the_winner(self):
        # ring beats binomial at 1 MiB in two rounds of three: the median says ring.
        table = rules(load(self.rounds([50.0, 60.0, 500.0]), "shm"))
        self.assertEqual(table, [("allreduce", 1, 0, "binomial"),
                                 ("allreduce", 1, 1048576, "ring")])

    def test_a_near_tie_keeps_the_choice(self):
        # ring 3% faster than binomial at 1 MiB: within the 5% hysteresis, no new rule.
        table = rules(load(self.rounds([97.0, 97.0, 97.0]), "shm"))
        self.assertEqual(table, [("allreduce", 1, 0, "binomial")])

    def test_a_clear_win_beyond_the_hysteresis_switches(self):
        # ring 7% faster: beyond the 5% hysteresis (tuned is judged within 10% of the best).
        table = rules(load(self.rounds([93.0, 93.0, 93.0]), "shm"))
        self.assertEqual(table, [("allreduce", 1, 0, "binomial"),
                                 ("allreduce", 1, 1048576, "ring")])

    def test_zero_bytes_choose_nothing(self):
        # hierarchical wins the 0-byte call by a nanosecond; at 8 B it is within the 5%
        # hysteresis of binomial but slower: 8 B, the smallest call that moves data, decides.
        path = write_round(self.folder, "zero.json", {
            ("Reduce", "commx-shm-hierarchical", 4, 0): 0.010,
            ("Reduce", "commx-shm-binomial", 4, 0): 0.011,
            ("Reduce", "commx-shm-hierarchical", 4, 8): 0.26,
            ("Reduce", "commx-shm-binomial", 4, 8): 0.25,
            ("Barrier", "commx-shm-flat", 4, 0): 3.0,
            ("Barrier", "commx-shm-binomial", 4, 0): 2.0,
        })
        self.assertEqual(rules(load([path], "shm")), [("barrier", 1, 0, "binomial"),
                                                      ("reduce", 1, 0, "binomial")])

    def test_rated_within_each_round(self):
        # The VM changes mode between runs (0.12-0.13 us fast, 0.55-0.6 slow). binomial is the
        # faster in two rounds of three, but met the slow mode in two where flat met it in
        # one: the medians of the times would choose flat.
        paths = []
        for k, (binomial, flat) in enumerate([(0.12, 0.13), (0.55, 0.13), (0.55, 0.6)]):
            folder = self.folder / f"round{k}"
            folder.mkdir()
            paths.append(write_round(folder, "shm-np2.json", {
                ("Allgather", "commx-shm-binomial", 2, 8): binomial,
                ("Allgather", "commx-shm-flat", 2, 8): flat,
            }))
        self.assertEqual(rules(load(paths, "shm")), [("allgather", 1, 0, "binomial")])

    def test_the_worse_mode_decides(self):
        # Four rounds with the CPUs on one die (a cache line 40 ns), where flat is 10% faster,
        # three on two dies (220 ns), where flat is twice binomial's time: pooled, the one-die
        # rounds are the median and would choose flat; each mode apart, flat's worse is 2.0
        # and binomial's 1.1, so binomial.
        paths = []
        for k, (line_ns, binomial, flat) in enumerate(
                [(40, 1.1, 1.0), (40, 1.1, 1.0), (40, 1.1, 1.0), (40, 1.1, 1.0), (220, 2.0, 4.0),
                 (220, 2.0, 4.0), (220, 2.0, 4.0), (40, 9.0, 1.0)]):
            folder = self.folder / f"round{k}"
            folder.mkdir()
            # The last round changed mode midway: left out, or flat would win it 9 to 1.
            after = 220 if k == 7 else line_ns
            (folder / "mode.txt").write_text(f"cache_line_ns {line_ns} {after}\n")
            paths.append(write_round(folder, "shm-np4.json", {
                ("Barrier", "commx-shm-binomial", 4, 0): binomial,
                ("Barrier", "commx-shm-flat", 4, 0): flat,
            }))
        self.assertEqual(rules(load(paths, "shm")), [("barrier", 1, 0, "binomial")])
        self.assertEqual(rules(load(paths[:4], "shm")), [("barrier", 1, 0, "flat")])
        # Two rounds of a mode are one spell's noise: pooled with the four, flat again.
        self.assertEqual(rules(load(paths[:6], "shm")), [("barrier", 1, 0, "flat")])

    def test_each_run_its_own_mode(self):
        # Seven rounds the cache line calls one-die before and after; the last three runs met
        # two dies within (their own mode.txt says so), where flat took three times binomial's
        # time.
        paths = []
        for k, (run_line, binomial, flat) in enumerate(
                [(40, 1.0, 0.9)] * 4 + [(220, 1.0, 3.0)] * 3):
            folder = self.folder / f"round{k}"
            folder.mkdir()
            (folder / "mode.txt").write_text("cache_line_ns 40 40\n")
            (folder / "shm-np2.mode.txt").write_text(f"cache_line_ns {run_line} {run_line}\n")
            paths.append(write_round(folder, "shm-np2.json", {
                ("Barrier", "commx-shm-binomial", 2, 0): binomial,
                ("Barrier", "commx-shm-flat", 2, 0): flat,
            }))
        self.assertEqual(rules(load(paths, "shm")), [("barrier", 1, 0, "binomial")])
        for k in (4, 5, 6):
            (self.folder / f"round{k}" / "shm-np2.mode.txt").unlink()
        self.assertEqual(rules(load(paths, "shm")), [("barrier", 1, 0, "flat")])

    def test_kept_rules_are_those_above_the_measured_ranks(self):
        old = self.folder / "old.hpp"
        old.write_text(header("shm", [("barrier", 1, 0, "binomial"), ("barrier", 3, 0, "flat"),
                                      ("barrier", 5, 0, "ring"), ("bcast", 9, 65536, "ring")],
                              "3 PMB runs on shm", 32))
        self.assertEqual(kept_rules(str(old), 4, {"barrier", "bcast"}),
                         [("barrier", 5, 0, "ring"), ("bcast", 9, 65536, "ring")])

    def test_kept_rules_keep_every_rule_of_a_collective_not_measured(self):
        old = self.folder / "old.hpp"
        old.write_text(header("shm", [("barrier", 1, 0, "binomial"), ("barrier", 5, 0, "ring"),
                                      ("bcast", 1, 0, "flat"), ("bcast", 9, 65536, "ring")],
                              "3 PMB runs on shm", 32))
        self.assertEqual(kept_rules(str(old), 4, {"bcast"}),
                         [("barrier", 1, 0, "binomial"), ("barrier", 5, 0, "ring"),
                          ("bcast", 9, 65536, "ring")])

    def test_a_sweep_at_more_ranks_remakes_its_bucket_alone(self):
        old = self.folder / "old.hpp"
        old.write_text(header("shm", [("barrier", 1, 0, "binomial"), ("barrier", 3, 0, "flat"),
                                      ("barrier", 5, 0, "ring"), ("barrier", 9, 0, "flat")],
                              "3 PMB runs on shm", 16))
        paths = [write_round(self.folder, "np8.json", {
            ("Barrier", "commx-shm-binomial", 8, 0): 1.0,
            ("Barrier", "commx-shm-ring", 8, 0): 2.0,
        })]
        times = load(paths, "shm")
        starts = first_buckets(str(old), times)
        self.assertEqual(starts, {"barrier": 5})
        self.assertEqual(rules(times, starts), [("barrier", 5, 0, "binomial")])
        self.assertEqual(kept_rules(str(old), 8, {"barrier"}, starts),
                         [("barrier", 1, 0, "binomial"), ("barrier", 3, 0, "flat"),
                          ("barrier", 9, 0, "flat")])

    def test_ring_bcast_is_rated_where_it_is_its_own(self):
        # From 64 KiB at 4 ranks ring's bcast scatters and gathers; at 2 ranks it is binomial's
        # tree, which a faster copy must not win for ring.
        paths = [write_round(self.folder, f"r{k}-{n}-{size}.json", {
            ("Bcast", "commx-shm-binomial", n, size): 20.0,
            ("Bcast", "commx-shm-ring", n, size): 10.0,
        }) for k in range(3) for n, size in [(2, 65536), (4, 8), (4, 65536)]]
        self.assertEqual(rules(load(paths, "shm")),
                         [("bcast", 1, 0, "binomial"), ("bcast", 3, 0, "binomial"),
                          ("bcast", 3, 65536, "ring")])

    def test_each_stack_its_own_table(self):
        paths = self.rounds([50.0, 50.0, 50.0])
        self.assertEqual(rules(load(paths, "tcp")), [("allreduce", 1, 0, "flat")])
        self.assertEqual(rules(load(paths, "wan")), [])

    def test_header_names_the_stack(self):
        text = header("shm+tcp", [("allreduce", 1, 0, "ring")], "3 PMB runs on shm+tcp", 8)
        self.assertIn("inline constexpr std::array tuned_rules_shm_tcp{", text)
        self.assertIn("inline constexpr int tuned_measured_ranks_shm_tcp = 8;", text)
        self.assertIn("tuning_rule{stats::op::allreduce, 1, 0, algorithm::ring},", text)


if __name__ == "__main__":
    unittest.main()
