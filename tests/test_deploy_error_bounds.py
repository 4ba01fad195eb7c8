"""The 95% error band drawn by the dashboard and stated in docs/consuming.md.

Claim: for a release whose noise is a sum of independent discrete Laplace variables (any
scales, any number of read-path nodes), |noise| <= K * sd + 1 with probability >= 95%, where
K = ln(20)/sqrt(2) ~ 2.118 is the exact 95% point of one continuous Laplace in sd units and
the +1 absorbs the integer lattice. The normal approximation (1.96 sd) is NOT enough: it
under-covers when one node dominates the read path (t = 2^k reads a single node).

Checked exactly (no sampling): the PMF of the sum is the convolution of the discrete Laplace
PMFs, truncated where the remaining tail is below 1e-15.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy/grafana/dashboards/streamdp.json"


def band_multiplier() -> float:
    """The K of the dashboard's upper band ``... streamdp_release_stddev{...}) * K + 1``."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    found = {
        float(m.group(1))
        for e in exprs
        if (m := re.search(r"streamdp_release_stddev\{[^}]*\}\) \* ([0-9.]+) \+ 1$", e))
    }
    assert len(found) == 1, found
    return found.pop()


def discrete_laplace_pmf(scale: float) -> tuple[np.ndarray, int]:
    """PMF over -M..M of P(k) ∝ exp(-|k|/scale), and M."""
    M = max(2, math.ceil(scale * 40))  # tail beyond M < exp(-40)
    k = np.arange(-M, M + 1)
    pmf = np.exp(-np.abs(k) / scale)
    return pmf / pmf.sum(), M


def sum_pmf(scales: list[float]) -> tuple[np.ndarray, np.ndarray]:
    total = np.array([1.0])
    for scale in scales:
        pmf, _ = discrete_laplace_pmf(scale)
        total = np.convolve(total, pmf)
    half = (len(total) - 1) // 2
    return np.arange(-half, half + 1), total


def coverage(scales: list[float], multiplier: float, plus_one: bool) -> float:
    support, pmf = sum_pmf(scales)
    sd = math.sqrt(float(np.sum(pmf * support.astype(float) ** 2)))
    half_width = multiplier * sd + (1.0 if plus_one else 0.0)
    return float(pmf[np.abs(support) <= half_width].sum())


def test_dashboard_uses_the_single_laplace_95_point() -> None:
    assert band_multiplier() == pytest.approx(math.log(20) / math.sqrt(2), abs=0.005)
    assert band_multiplier() >= math.log(20) / math.sqrt(2)


SINGLE_SCALES = [0.2, 0.3, 0.5, 0.8, 1.0, 1.7, 2.0, 3.3, 5.0, 9.5, 20.0, 47.0]


@pytest.mark.parametrize("scale", SINGLE_SCALES)
def test_band_covers_95_percent_of_a_single_node(scale: float) -> None:
    assert coverage([scale], band_multiplier(), plus_one=True) >= 0.95


def test_band_covers_95_percent_of_read_path_sums() -> None:
    rng = np.random.default_rng(20240601)
    worst = 1.0
    for nodes in range(2, 13):
        for _ in range(6):
            # read paths mix a few large-scale (low-weight) nodes with many small ones
            scales = list(np.exp(rng.uniform(np.log(0.3), np.log(25.0), size=nodes)))
            worst = min(worst, coverage(scales, band_multiplier(), plus_one=True))
    assert worst >= 0.95


def test_normal_approximation_undercovers_a_dominant_node() -> None:
    # power check: the check above can fail — 1.96 sd misses more than 5% for one node
    assert coverage([20.0], 1.96, plus_one=False) < 0.945
    assert coverage([47.0], 1.96, plus_one=False) < 0.945


@pytest.mark.parametrize("sigma", [0.3, 0.6, 1.0, 1.7, 3.0, 8.0, 40.0])
def test_band_covers_95_percent_of_a_discrete_gaussian(sigma: float) -> None:
    """zCDP releases: the same band over discrete Gaussian noise (exact PMF, sd from the
    exact variance the releases declare), with sums of Gaussians Gaussian again."""
    from streamdp.noise.gaussian import discrete_gaussian_variance

    reach = int(40 * sigma) + 2
    support = np.arange(-reach, reach + 1)
    weights = np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma * sigma))
    pmf = weights / weights.sum()
    sd = math.sqrt(discrete_gaussian_variance(sigma))
    inside = float(pmf[np.abs(support) <= band_multiplier() * sd + 1].sum())
    assert inside >= 0.95
    # power: the band without its +1 and at half the multiplier misses far more than 5%
    assert float(pmf[np.abs(support) <= 0.5 * band_multiplier() * sd].sum()) < 0.95 or sd < 0.5
