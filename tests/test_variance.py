"""Reported release variances equal the empirical variance of the counter's releases.

The bank's ``width`` counters are independent replicates (each gets its own noise per node), so
one run with width 100,000 gives 1e5 samples per release. Test: z-test of the mean squared error
against the reported variance (p < 1e-6), paired with a power check (the same test rejects the
variance implied by a 30%-off noise scale, and the continuous-Laplace formula where the discrete
one differs).
"""

from __future__ import annotations

import numpy as np
import pytest
from stats_continual import P_THRESHOLD, variance_z_pvalue

from streamdp.continual import ContinualCounter, build_strategy
from streamdp.continual.fenwick import read_matrix
from streamdp.continual.variance import (
    check_noise,
    node_variances,
    total_variances,
    variance_profile,
)
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler

WIDTH = 100_000


@pytest.mark.parametrize(
    ("mechanism", "objective", "horizon", "epsilon"),
    [
        ("fda", "total", 11, 1.0),
        ("fda", "minimax", 8, 2.0),
        ("binary", "total", 7, 1.0),
        ("naive", "total", 5, 0.7),
    ],
)
def test_reported_std_equals_empirical(
    mechanism: str, objective: str, horizon: int, epsilon: float
) -> None:
    delta = 1.0
    strategy = build_strategy(mechanism, objective, horizon)  # type: ignore[arg-type]
    counter = ContinualCounter(strategy, epsilon, delta, WIDTH, InsecureSeededSampler(2024))
    rng = np.random.default_rng(9)
    truth = rng.integers(0, 20, size=horizon)
    running = 0
    for t in range(1, horizon + 1):
        running += int(truth[t - 1])
        release = counter.close_period(np.full(WIDTH, truth[t - 1], dtype=np.int64))
        for err, std in (
            (release.noisy_total - running, release.total_std),
            (release.noisy_count - truth[t - 1], release.count_std),
        ):
            assert variance_z_pvalue(err, std**2) > P_THRESHOLD, (t, std)
            # power: a 30%-off noise scale changes the variance by 1.69x or 0.59x
            assert variance_z_pvalue(err, 1.3**2 * std**2) < P_THRESHOLD
            assert variance_z_pvalue(err, std**2 / 1.3**2) < P_THRESHOLD


def test_discrete_not_continuous_variance_is_reported_at_small_scales() -> None:
    # epsilon = 4: node scales ~0.25..1, where 2 b^2 overstates the discrete variance a lot
    strategy = build_strategy("fda", "total", 3)
    counter = ContinualCounter(strategy, 4.0, 1.0, WIDTH, InsecureSeededSampler(5))
    release = counter.close_period(np.zeros(WIDTH, dtype=np.int64))
    continuous = node_variances(strategy, 4.0, 1.0, "laplace")[0]
    assert variance_z_pvalue(release.noisy_total, release.total_std**2) > P_THRESHOLD
    assert variance_z_pvalue(release.noisy_total, continuous) < P_THRESHOLD


@pytest.mark.parametrize("mechanism", ["fda", "binary", "naive"])
def test_profile_matches_dense_formulas(mechanism: str) -> None:
    N = 45
    strategy = build_strategy(mechanism, "total", N)  # type: ignore[arg-type]
    prof = variance_profile(strategy, 0.5, 3.0, "laplace")
    v = 2 * (3.0 / (0.5 * strategy.weights)) ** 2
    # scales are rounded up (at most ~2^-44 relative) so that the loss never exceeds epsilon
    np.testing.assert_allclose(prof.node, v, rtol=1e-12)
    # read matrix R: s~ = R c~, count = D s~ with D the difference operator
    R = read_matrix(N) if mechanism != "naive" else np.tril(np.ones((N, N)))
    D = np.eye(N) - np.eye(N, k=-1)
    cov_total = R @ np.diag(v) @ R.T
    cov_count = D @ cov_total @ D.T
    np.testing.assert_allclose(prof.total, np.diag(cov_total), rtol=1e-12)
    np.testing.assert_allclose(prof.count, np.diag(cov_count), rtol=1e-12)
    assert prof.mean_variance == pytest.approx(np.diag(cov_total).mean(), rel=1e-12)
    assert prof.max_variance == pytest.approx(np.diag(cov_total).max(), rel=1e-12)


def test_counter_and_profile_agree() -> None:
    strategy = build_strategy("fda", "minimax", 30)
    prof = variance_profile(strategy, 1.0, 2.0)
    counter = ContinualCounter(strategy, 1.0, 2.0, 1, InsecureSeededSampler(0))
    for t in range(1, 31):
        release = counter.close_period(np.zeros(1, dtype=np.int64))
        assert release.total_std**2 == pytest.approx(prof.total[t - 1], rel=1e-12)
        assert release.count_std**2 == pytest.approx(prof.count[t - 1], rel=1e-12)


def test_paper_units_binary_mechanism_at_4095() -> None:
    # DESIGN §6 quotes ~1728 (units 1/eps^2, Delta = 1, continuous Laplace): every node has
    # variance 2 * 12^2 = 288 and the mean popcount over t = 1..4095 is 12 * 2048 / 4095
    strategy = build_strategy("binary", "total", 4095)
    v = node_variances(strategy, 1.0, 1.0, "laplace")
    mean = total_variances(strategy, v).mean()
    assert mean == pytest.approx(288 * 12 * 2048 / 4095, rel=1e-12)
    assert round(mean) == 1728


def test_bad_noise_name() -> None:
    with pytest.raises(ConfigError, match="noise"):
        check_noise("gaussian")
