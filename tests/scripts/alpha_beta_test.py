# SPDX-License-Identifier: MIT
"""scripts/alpha_beta.py's fit: it recovers a known alpha and beta, weighs sizes alike in
relative terms, and refuses what cannot be fitted; a line that is no cost is measured again."""

import sys
import types
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import alpha_beta  # noqa: E402
from alpha_beta import fit  # noqa: E402

SIZES = [0, 8, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]


class FitTest(unittest.TestCase):
    def test_recovers_a_line(self):
        alpha, beta = 2e-6, 1e-10  # 2 us, 10 GB/s
        got_alpha, got_beta, worst = fit({n: alpha + beta * n for n in SIZES})
        self.assertAlmostEqual(got_alpha / alpha, 1, places=9)
        self.assertAlmostEqual(got_beta / beta, 1, places=9)
        self.assertLess(worst, 1e-9)

    def test_small_sizes_count(self):
        # 5% too slow at the two largest sizes: a plain least-squares fit would bend alpha far
        # off to follow them; the relative one keeps the latency within 5%.
        alpha, beta = 5e-6, 2e-10
        points = {n: alpha + beta * n for n in SIZES}
        for n in SIZES[-2:]:
            points[n] *= 1.05
        got_alpha, _, worst = fit(points)
        self.assertLess(abs(got_alpha / alpha - 1), 0.05)
        self.assertGreater(worst, 0.01)

    def test_refuses_what_it_cannot_fit(self):
        with self.assertRaises(ValueError):
            fit({8: 1e-6})
        with self.assertRaises(ValueError):
            fit({8: 1e-6, 1024: 0.0})


class MeasuredAgainTest(unittest.TestCase):
    ARGS = types.SimpleNamespace(build_dir=Path("."), repetitions=1, min_time=0.01, timeout=1)
    LINE = {n: 2e-6 + 1e-10 * n for n in SIZES}
    FLAT = {n: 6e-5 - 1e-18 * n for n in SIZES}  # a noisy spell: latency alone, falling

    def test_a_flat_line_is_measured_again(self):
        with mock.patch.object(alpha_beta, "measure", side_effect=[self.FLAT, self.LINE]) as m:
            points, (alpha, beta, _) = alpha_beta.measured_fit("tcp", self.ARGS)
        self.assertEqual(m.call_count, 2)
        self.assertEqual(points, self.LINE)
        self.assertAlmostEqual(beta / 1e-10, 1, places=6)

    def test_gives_up_after_its_attempts(self):
        flat = [self.FLAT] * alpha_beta.FIT_ATTEMPTS
        with mock.patch.object(alpha_beta, "measure", side_effect=flat) as m:
            with self.assertRaisesRegex(ValueError, "not a cost in each of 3"):
                alpha_beta.measured_fit("tcp", self.ARGS)
        self.assertEqual(m.call_count, alpha_beta.FIT_ATTEMPTS)


if __name__ == "__main__":
    unittest.main()
