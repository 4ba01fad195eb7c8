"""Level budgets of a k-ary GLS tree under rho-zCDP (issue 27): the binary (or k-ary) tree with
least-squares decoding, its noise the discrete Gaussian.

Every period is covered by one block of each level, so a record's L2 footprint over the
nodes has one entry per level and the tree is ``rho``-zCDP when level ``l`` spends
``rho_l = rho * budgets[l]`` with ``sum(budgets) <= 1``: its nodes get
``sigma_l^2 = Delta_2^2 / (2 rho_l)`` (Bun and Steinke 2016, Lemma 2.3, composition over the
levels). Unlike the discrete Laplace (variance ``~ 1/budget^2``), a Gaussian node's variance
is ``~ 1/budget``, so the budgets that minimise an objective differ from the pure-DP ones of
:mod:`streamdp.continual.kary_optimise`; they are tuned here with the exact GLS variances of
:meth:`streamdp.continual.kary.KaryStrategy.total_variances` at ``Delta_2 = 1``, ``rho = 1/2``
(variances scale by ``Delta_2^2 / (2 rho)``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.kary import GlsStrategy, KaryStrategy
from streamdp.continual.kary_config import check_kary_objective, exact_budgets
from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
GAUSSIAN_OBJECTIVES = ("total", "minimax")
#: Branchings searched when none is given (the Gaussian optimum sits at small k).
_SEARCH_BRANCHINGS = tuple(range(2, 9))


def unit_node_variances(strategy: KaryStrategy) -> FloatArray:
    """``sigma_l^2 = 1 / budgets[l]`` of every node (``Delta_2 = 1``, ``rho = 1/2``, continuous
    Gaussian); shape ``(nodes,)``."""
    per_level = 1.0 / np.asarray(strategy.budgets, dtype=np.float64)
    out: FloatArray = per_level[strategy.node_levels]
    return out


def _score(strategy: KaryStrategy, objective: str) -> float:
    total = strategy.total_variances(unit_node_variances(strategy))
    return float(total.mean() if objective == "total" else total.max())


def _build(horizon: int, objective: str, branching: int, fractions: FloatArray) -> KaryStrategy:
    return KaryStrategy(
        "kary_gls", check_kary_objective(objective), horizon, branching, exact_budgets(fractions)
    )


@lru_cache(maxsize=64)
def optimise_gaussian_gls(
    horizon: int, objective: str = "total", branching: int | None = None
) -> KaryStrategy:
    """The ``kary_gls`` strategy minimising the mean (``total``) or worst (``minimax``)
    running-total variance under zCDP for exactly ``horizon`` periods: ``k`` is ``branching``
    or the best of 2..8 with equal budgets; then the level budgets are tuned (Nelder-Mead on
    log-ratios from equal budgets, deterministic) and kept only if they beat equal ones."""
    if objective not in GAUSSIAN_OBJECTIVES:
        raise ConfigError(
            f"objective must be one of {', '.join(GAUSSIAN_OBJECTIVES)} under zCDP, got "
            f"{objective!r}"
        )
    horizon = check_horizon(horizon)
    candidates = [branching] if branching is not None else list(_SEARCH_BRANCHINGS)
    best: tuple[float, KaryStrategy] | None = None
    for k in candidates:
        levels = GlsStrategy.levels_for(horizon, k)
        equal = _build(horizon, objective, k, np.full(levels, 1.0 / levels))
        score = _score(equal, objective)
        if best is None or score < best[0]:
            best = (score, equal)
    assert best is not None
    start = best[1]
    levels = len(start.budgets)
    if levels == 1:
        return start

    def f(theta: FloatArray) -> float:
        weights = np.exp(np.concatenate([[0.0], theta]))
        fractions = np.maximum(weights / weights.sum(), 1e-3)
        return _score(_build(horizon, objective, start.branching, fractions), objective)

    result = minimize(
        f,
        np.zeros(levels - 1),
        method="Nelder-Mead",
        options={"maxiter": 400 * levels, "xatol": 1e-4, "fatol": 1e-7},
    )
    weights = np.exp(np.concatenate([[0.0], np.asarray(result.x, dtype=np.float64)]))
    tuned = _build(horizon, objective, start.branching, np.maximum(weights / weights.sum(), 1e-3))
    return tuned if _score(tuned, objective) < best[0] else start
