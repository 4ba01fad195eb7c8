"""The baselines the accuracy benchmark sets beside FDA (DESIGN.md §6) are computed, not quoted:
Honaker's online estimator on the binary mechanism's tree equals the dense generalised
least-squares estimate from the nodes released so far, and at N = 4095 it gives the paper's 980
(units 1/eps^2); the binary mechanism gives the paper's 1728."""

from __future__ import annotations

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
