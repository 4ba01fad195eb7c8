"""The baselines the accuracy benchmark sets beside FDA (DESIGN.md §6) are computed, not quoted:
Honaker's online estimator on the binary mechanism's tree equals the dense generalised
least-squares estimate from the nodes released so far, and at N = 4095 it gives the paper's 980
(units 1/eps^2); the binary mechanism gives the paper's 1728; the smooth binary mechanism's
releases are exactly the running totals, with the same error at every period, and with the
paper's balanced leaves it gives DESIGN's 1024."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest


@pytest.fixture
def accuracy(monkeypatch: pytest.MonkeyPatch) -> Any:
    from tests.test_benchmarks_import import BENCHMARKS

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import continual_accuracy

    return continual_accuracy


@pytest.mark.parametrize("levels", [2, 3, 4])
def test_honaker_online_is_the_best_estimate_from_the_released_nodes(
    accuracy: Any, levels: int
) -> None:
    recursion = accuracy.honaker_online(levels)
    dense = accuracy.honaker_online_dense(levels)
    np.testing.assert_allclose(recursion, dense, rtol=1e-12)
    # and never worse than the binary mechanism's plain sum of nodes; strictly better at
    # every even t (each of its blocks holds two periods or more, so it has children to use)
    t = np.arange(1, 2**levels)
    plain = np.array([bin(int(x)).count("1") for x in t]) * 2.0 * levels**2
    assert np.all(recursion <= plain + 1e-9)
    even = t % 2 == 0
    assert np.all(recursion[even] < plain[even])


def test_the_papers_baselines_at_4095(accuracy: Any) -> None:
    assert accuracy.honaker_online(12).mean() == pytest.approx(980, abs=0.5)
    assert accuracy.mse("binary", 4095).mean() == pytest.approx(1728, abs=0.5)


@pytest.mark.parametrize(
    ("horizon", "height", "ones"),
    [
        (10, 5, 2),
        (20, 6, 3),
        (35, 7, 4),
        (30, 7, 4),
        (15, 6, 4),
        (56, 8, 3),
        (5, 4, 1),
        (200, 10, 5),
    ],
)
def test_smooth_binary_against_its_explicit_matrices(
    accuracy: Any, horizon: int, height: int, ones: int
) -> None:
    mse, sensitivity = accuracy.smooth_binary(horizon, height, ones)
    dense_mse, dense_sensitivity = accuracy.smooth_binary_dense(horizon, height, ones)
    assert sensitivity == dense_sensitivity
    np.testing.assert_array_equal(mse, dense_mse)
    # smooth: one error for every period (the leaves all have `ones` one-bits)
    assert np.all(mse == mse[0])
    if ones >= 2 and horizon == math.comb(height, ones):
        # closed form on a full set of leaves: `ones` nodes per release, Delta = zeros + 1
        assert mse[0] == 2 * ones * (height - ones + 1) ** 2


def test_smooth_binary_at_4095(accuracy: Any) -> None:
    height, ones = accuracy.smooth_binary_shape(4095, balanced=True)
    assert (height, ones) == (15, 8)
    mse, sensitivity = accuracy.smooth_binary(4095, height, ones)
    assert sensitivity == 8
    assert mse.mean() == 1024.0
    # choosing the ones for L1 rather than balance: fewer zeros, smaller Delta
    height, ones = accuracy.smooth_binary_shape(4095, balanced=False)
    mse, _ = accuracy.smooth_binary(4095, height, ones)
    assert (height, ones) == (16, 11)
    assert mse.mean() == 792.0
