"""Statistical helpers for the continual-counting and noise tests (not a test module).

Thresholds: every test rejects at p < 1e-6 so it never flakes, and every test is paired with a
power check showing the same procedure rejects a 30%-wrong scale.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

P_THRESHOLD = 1e-6


def discrete_laplace_pmf(k: np.ndarray, scale: float) -> np.ndarray:
    """Exact P(K = k) = (1-q)/(1+q) q^|k|, q = exp(-1/scale)."""
    q = math.exp(-1.0 / scale)
    return (1.0 - q) / (1.0 + q) * q ** np.abs(k)


def chi2_discrete_laplace_pvalue(samples: np.ndarray, scale: float) -> float:
    """Chi-square goodness-of-fit p-value of integer samples against the discrete Laplace.

    Bins: every integer k with expected count >= 20, plus the two tails merged.
    """
    n = samples.size
    q = math.exp(-1.0 / scale)
    # largest K with n * P(|k| = K) >= 20 on each side
    p0 = (1.0 - q) / (1.0 + q)
    K = math.floor(math.log(20.0 / (n * p0)) / math.log(q)) if n * p0 > 20 else 0
    K = max(K, 1)
    ks = np.arange(-K, K + 1)
    expected = n * discrete_laplace_pmf(ks, scale)
    tail = (n - expected.sum()) / 2.0  # P(k > K) = P(k < -K) by symmetry
    observed = np.array(
        [np.sum(samples < -K)] + [np.sum(samples == k) for k in ks] + [np.sum(samples > K)],
        dtype=np.float64,
    )
    exp_all = np.concatenate([[tail], expected, [tail]])
    return float(stats.chisquare(observed, exp_all).pvalue)


def variance_z_pvalue(deviations: np.ndarray, variance: float) -> float:
    """Two-sided p-value of H0: E[d] = 0 and Var(d) = variance, from the sample second moment.

    Uses the CLT for the mean of d^2 with its empirical variance (fourth moment); valid for
    the heavy-but-finite tails of sums of discrete Laplace noise.
    """
    d2 = deviations.astype(np.float64) ** 2
    m = d2.mean()
    se = d2.std(ddof=1) / math.sqrt(d2.size)
    z = (m - variance) / se
    return float(2.0 * stats.norm.sf(abs(z)))
