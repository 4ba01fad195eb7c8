"""Choosing a k-ary strategy: the branching ``k`` and the per-level budgets that minimise an
objective (mean or worst running-total variance, or mean period-count variance) for exactly
``N`` periods, and the published digits configuration to compare with.

Candidates are scored with one variance per level (``Delta = epsilon = 1``), which costs O(L)
per sampled release (:func:`~streamdp.continual.kary_digits.digit_sample_variances`,
:func:`~streamdp.continual.kary_gls.gls_uniform_eval`); the chosen strategy's own variances are
exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache, partial

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_config import (
    FloatArray,
    IntArray,
    KaryMechanism,
    KaryObjective,
    check_branching,
    check_kary_mechanism,
    check_kary_objective,
    exact_budgets,
)
from streamdp.continual.kary_digits import (
    digit_levels,
    digit_sample_layout,
    digit_sample_variances,
)
from streamdp.continual.kary_gls import gls_uniform_eval, gls_uniform_layout

_SEARCH_BRANCHINGS = tuple(range(2, 41))
_SAMPLE_PERIODS = 8_192  # objective evaluated on this many well-spread t when N is larger
_TUNE_WITHIN = 1.10  # level counts whose best equal-budget score is this close get tuned
_REFINED = 4  # k re-tuned from their level count's budgets
MIN_LEVEL_SHARE = 0.01  # every level keeps at least this share of epsilon


def _levels_for(mechanism: KaryMechanism, horizon: int, branching: int) -> int:
    return KaryStrategy.kind(mechanism).levels_for(horizon, branching)


class _Scorer:
    """The objective of one ``(mechanism, objective, N, k)`` as a function of level budgets
    (``Delta = epsilon = 1``, continuous Laplace: ``v = 2 / lambda^2``), on ``sample``."""

    def __init__(
        self,
        mechanism: KaryMechanism,
        objective: KaryObjective,
        horizon: int,
        branching: int,
        sample: IntArray,
    ) -> None:
        self.mechanism, self.objective = mechanism, objective
        self.horizon, self.branching, self.sample = horizon, branching, sample
        self.levels = KaryStrategy.kind(mechanism).levels_for(horizon, branching)
        # where each sampled release sits in the tree: independent of the budgets, found once
        self._variances: Callable[[FloatArray], tuple[FloatArray, FloatArray]]
        if mechanism == "kary_digits":
            digits = digit_sample_layout(branching, self.levels, sample)
            self._variances = partial(digit_sample_variances, digits)
        else:
            tree = gls_uniform_layout(horizon, branching, self.levels, sample - 1)
            self._variances = partial(gls_uniform_eval, layout=tree, branching=branching)

    def __call__(self, budgets: npt.NDArray[np.float64]) -> float:
        level_var = 2.0 / np.asarray(budgets, dtype=np.float64) ** 2
        total, count = self._variances(level_var)
        if self.objective == "total":
            return float(total.mean())
        if self.objective == "minimax":
            return float(total.max())
        return float(count.mean())


def _sample(horizon: int) -> IntArray:
    """All ``t`` up to ``_SAMPLE_PERIODS``; beyond, a golden-ratio (Weyl) sequence over
    ``1..N`` plus ``t = 1`` and ``t = N``: spread evenly without aliasing with powers of k."""
    if horizon <= _SAMPLE_PERIODS:
        return np.arange(1, horizon + 1, dtype=np.int64)
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    spread = np.floor(np.mod(np.arange(_SAMPLE_PERIODS) * golden, 1.0) * horizon) + 1
    return np.unique(np.concatenate([[1, horizon], spread]).astype(np.int64))


def _floored(budgets: npt.NDArray[np.float64]) -> FloatArray:
    """Every level keeps at least ``MIN_LEVEL_SHARE`` of the budget (no absurd noise scales)."""
    floored = np.maximum(budgets, MIN_LEVEL_SHARE)
    out: FloatArray = floored / floored.sum()
    return out


def _softmax(theta: npt.NDArray[np.float64]) -> FloatArray:
    x = np.concatenate([[0.0], theta])
    e = np.exp(x - x.max())
    out: FloatArray = e / e.sum()
    return out


@lru_cache(maxsize=256)
def optimise(
    mechanism: str, objective: str, horizon: int, branching: int | None = None
) -> KaryStrategy:
    """The k-ary strategy minimising ``objective`` for exactly ``horizon`` periods (no padding).

    ``k``: ``branching`` if given, else searched over 2..40 with equal level budgets; for
    each number of levels ``L`` within 10% of the best, the level budgets of its best ``k``
    are tuned (Nelder-Mead on log-ratios, every level keeping at least 1% of the budget);
    every ``k`` is re-scored with its ``L``'s tuned budgets and the four best are tuned again.
    For ``N > 8,192`` the search scores a well-spread sample of 8,192 releases; the
    returned strategy's reported variances are always exact for every ``t``.
    """
    mech = check_kary_mechanism(mechanism)
    obj = check_kary_objective(objective)
    n = check_horizon(horizon)
    sample = _sample(n)
    candidates = [check_branching(branching)] if branching is not None else list(_SEARCH_BRANCHINGS)
    scorers = {k: _Scorer(mech, obj, n, k, sample) for k in candidates}
    scored = []
    for k, scorer in scorers.items():
        equal = np.full(scorer.levels, 1.0 / scorer.levels)
        scored.append((scorer(equal), k, equal))
    scored.sort(key=lambda item: item[0])

    def tune(k: int, start: FloatArray) -> tuple[float, FloatArray]:
        scorer = scorers[k]
        if start.shape[0] == 1:
            return scorer(start), start

        def f(theta: npt.NDArray[np.float64]) -> float:
            return scorer(_floored(_softmax(theta)))

        theta0 = np.log(start[1:] / start[0])
        result = minimize(
            f,
            theta0,
            method="Nelder-Mead",
            options={"maxfev": 100 + 40 * start.shape[0], "xatol": 1e-4, "fatol": 1e-9},
        )
        theta = np.asarray(result.x, dtype=np.float64)
        return f(theta), _floored(_softmax(theta))

    # tune once per level count (budgets depend mostly on L), re-score every k of that count
    # with those budgets, then refine the two best
    group_budgets: dict[int, FloatArray] = {}
    for value, k, equal in scored:
        levels = equal.shape[0]
        if levels not in group_budgets and value <= _TUNE_WITHIN * scored[0][0]:
            group_budgets[levels] = tune(k, equal)[1]
    rescored = sorted(
        ((scorers[k](group_budgets.get(equal.shape[0], equal)), k) for _, k, equal in scored),
    )
    best_value, best_k, best_budgets = scored[0]
    for _, k in rescored[:_REFINED]:
        levels = _levels_for(mech, n, k)
        value, budgets = tune(k, group_budgets.get(levels, np.full(levels, 1.0 / levels)))
        if value < best_value:
            best_value, best_k, best_budgets = value, k, budgets
    return KaryStrategy(
        mechanism=mech,
        objective=obj,
        horizon=n,
        branching=best_k,
        budgets=exact_budgets(best_budgets),
    )


def published_digits(horizon: int, branching: int = 20) -> KaryStrategy:
    """The published configuration: ``k = 20`` (digits -9..10), equal budget per level."""
    levels = digit_levels(horizon, branching)
    return KaryStrategy(
        mechanism="kary_digits",
        objective="total",
        horizon=horizon,
        branching=branching,
        budgets=exact_budgets(np.ones(levels)),
    )
