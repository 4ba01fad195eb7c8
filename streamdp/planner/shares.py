"""Shares of a stream's budget over its budget groups (issue 29; seed 002's heterogeneous
allocation): the search both planners of group weights use (a places stream's levels,
:mod:`streamdp.planner.level_weights`; a census stream's total, marginals and cells,
:mod:`streamdp.planner.attribute_weights`).

Every group runs the same strategy, so node ``i``'s noise variance in group ``g`` is the
whole-budget variance ``v_i`` times a factor of the group's share ``w_g``: ``(G w_g)^-2`` under
pure DP (Laplace scale ``Delta_g / (epsilon w_g)`` with ``Delta_g = Delta / G``) and
``(G w_g)^-1`` under zCDP (``sigma^2 = (L2^2 / G) / (2 rho w_g)``), ``G`` the number of groups
(:func:`group_variance_factors`). After the GLS projection each counter keeps a multiple of
``v_i``, the same for every node and period, so an objective of the shares alone (a mean of
those multiples) is minimised on the simplex (:func:`optimal_shares`). Continuous-noise
variances: the discrete noise the stream draws differs from them by at most 1/6 of a count
squared per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize

FloatArray = npt.NDArray[np.float64]
Definition = Literal["pure", "zcdp"]

#: The smallest share the search gives a group (a group with no budget has no estimate).
MIN_SHARE = 1e-4
#: Grid points per side of the simplex the pure-DP search starts from, and how many of the
#: best it refines.
GRID_STEPS = 20
STARTS = 3


def group_variance_factors(weights: npt.ArrayLike, definition: Definition) -> FloatArray:
    """Each group's node variance over the whole-budget one, for shares ``weights``
    (normalised to add up to one)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    out: FloatArray = (w.shape[0] * w) ** (-2.0 if definition == "pure" else -1.0)
    return out


def optimal_shares(
    objective: Callable[[FloatArray], float], groups: int, definition: Definition
) -> FloatArray:
    """The shares (adding up to one) that minimise ``objective`` (a function of the shares).

    Under zCDP a GLS variance is convex in the shares (information linear in them); under pure
    DP it need not be (information grows with the square of a share), so the search starts
    from the best points of a grid over the simplex (:data:`GRID_STEPS` per side) and refines
    each with SLSQP, keeping the best."""
    if groups == 1:
        return np.ones(1)

    def value(w: FloatArray) -> float:
        return objective(np.clip(w, MIN_SHARE, None))

    starts = [np.full(groups, 1.0 / groups)]
    if definition == "pure":
        grid = _simplex_grid(groups, GRID_STEPS)
        scores = [value(w) for w in grid]
        starts += [grid[i] for i in np.argsort(scores)[:STARTS]]
    best = starts[0]
    for start in starts:
        result = optimize.minimize(
            value,
            start,
            method="SLSQP",
            bounds=[(MIN_SHARE, 1.0)] * groups,
            constraints=[{"type": "eq", "fun": lambda w: float(np.sum(w) - 1.0)}],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        found = np.clip(np.asarray(result.x, dtype=np.float64), MIN_SHARE, None)
        found = found / found.sum()
        if value(found) < value(best):
            best = found
    return best


def _simplex_grid(groups: int, steps: int) -> list[FloatArray]:
    """Points of the simplex with coordinates multiples of ``1/steps``, every one at least
    :data:`MIN_SHARE` (for many groups, fewer steps: at most about 10^4 points)."""
    while steps > 2 and math.comb(steps + groups - 1, groups - 1) > 10_000:
        steps -= 1
    points: list[FloatArray] = []

    def extend(prefix: list[int], left: int) -> None:
        if len(prefix) == groups - 1:
            points.append(np.array([*prefix, left], dtype=np.float64) / steps)
            return
        for k in range(left + 1):
            extend([*prefix, k], left - k)

    extend([], steps)
    return [np.clip(p, MIN_SHARE, None) / np.clip(p, MIN_SHARE, None).sum() for p in points]
