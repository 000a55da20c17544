# SPDX-License-Identifier: MIT
"""scripts/alpha_beta.py's fit: it recovers a known alpha and beta, weighs sizes alike in
relative terms, and refuses what cannot be fitted."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
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


if __name__ == "__main__":
    unittest.main()
