"""Level weights for a places stream (issue 29; seed 002): the shares of the budget that
minimise the error of the consistent counts of one level (the counties, say) or of every level
alike.

Every level runs the same strategy, so node ``i``'s noise variance in level ``l`` is the
whole-budget variance ``v_i`` times a factor of the level's share ``w_l``: ``(L w_l)^-2``
under pure DP (Laplace scale ``Delta_l / (epsilon w_l)`` with ``Delta_l = Delta / L``) and
``(L w_l)^-1`` under zCDP (``sigma^2 = (L2^2 / L) / (2 rho w_l)``), ``L`` the number of levels.
After the tree projection (GLS under those variances) each place keeps a multiple ``f_v(w)`` of
``v_i`` (:func:`~streamdp.consistency.tree.tree_projection_variances`), the same multiple for
every node and period. The objective is the mean of ``f_v`` over the target places, minimised
on the simplex by SLSQP: under zCDP a convex function of ``w`` (the GLS variance is convex and
decreasing in the information, which is linear in ``w``); under pure DP the information grows
as ``w^2`` and the objective need not be convex, so the search starts from a grid.
Continuous-noise variances: the discrete noise the stream draws differs from them by at most
1/6 of a count squared per node.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize

from streamdp.consistency.tree import Tree, tree_projection_variances

if TYPE_CHECKING:
    from streamdp.engine.spec import StreamSpec

FloatArray = npt.NDArray[np.float64]
Definition = Literal["pure", "zcdp"]

#: The smallest share the search gives a level (a level with no budget has no estimate).
MIN_SHARE = 1e-4


def level_variance_factors(weights: npt.ArrayLike, definition: Definition) -> FloatArray:
    """Each level's node variance over the whole-budget one, for shares ``weights``
    (normalised to add up to one)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    levels = w.shape[0]
    out: FloatArray = (levels * w) ** (-2.0 if definition == "pure" else -1.0)
    return out


def consistent_level_errors(
    tree: Tree, weights: npt.ArrayLike, definition: Definition
) -> FloatArray:
    """Mean variance of each level's consistent counts under ``weights``, per level, over the
    whole-budget variance of one place's release (equal weights and no projection give 1)."""
    depth = tree.depth
    factors = level_variance_factors(weights, definition)
    projected = tree_projection_variances(tree, factors[depth])
    levels = factors.shape[0]
    out: FloatArray = np.array([projected[depth == level].mean() for level in range(levels)])
    return out


def objective_value(
    tree: Tree, weights: npt.ArrayLike, definition: Definition, target: int | None
) -> float:
    """Mean consistent variance of the places of level ``target``; None: the mean over the
    levels of each level's mean (every level counts alike, however many places it has)."""
    errors = consistent_level_errors(tree, weights, definition)
    return float(errors.mean() if target is None else errors[target])


def optimal_level_weights(
    tree: Tree, definition: Definition, target: int | None = None
) -> FloatArray:
    """The shares (adding up to one, root level first) that minimise :func:`objective_value`
    for ``target`` (a level; None: every level alike).

    Under zCDP the objective is convex in the shares (information linear in them); under pure
    DP it is not (information grows with the square of a share), so the search starts from
    the best points of a grid over the simplex (:data:`GRID_STEPS` per side) and refines each
    with SLSQP, keeping the best."""
    levels = len(tree.level_bounds)
    if target is not None and not 0 <= target < levels:
        raise ValueError(f"target level must be in 0..{levels - 1}, got {target}")
    if levels == 1:
        return np.ones(1)

    def value(w: FloatArray) -> float:
        return objective_value(tree, np.clip(w, MIN_SHARE, None), definition, target)

    starts = [np.full(levels, 1.0 / levels)]
    if definition == "pure":
        grid = _simplex_grid(levels, GRID_STEPS)
        scores = [value(w) for w in grid]
        starts += [grid[i] for i in np.argsort(scores)[:STARTS]]
    best = starts[0]
    for start in starts:
        result = optimize.minimize(
            value,
            start,
            method="SLSQP",
            bounds=[(MIN_SHARE, 1.0)] * levels,
            constraints=[{"type": "eq", "fun": lambda w: float(np.sum(w) - 1.0)}],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        found = np.clip(np.asarray(result.x, dtype=np.float64), MIN_SHARE, None)
        found = found / found.sum()
        if value(found) < value(best):
            best = found
    return best


#: Grid points per side of the simplex the pure-DP search starts from, and how many of the
#: best it refines.
GRID_STEPS = 20
STARTS = 3


def _simplex_grid(levels: int, steps: int) -> list[FloatArray]:
    """Points of the simplex with coordinates multiples of ``1/steps``, every one at least
    :data:`MIN_SHARE` (for many levels, fewer steps: at most about 10^4 points)."""
    while steps > 2 and math.comb(steps + levels - 1, levels - 1) > 10_000:
        steps -= 1
    points: list[FloatArray] = []

    def extend(prefix: list[int], left: int) -> None:
        if len(prefix) == levels - 1:
            points.append(np.array([*prefix, left], dtype=np.float64) / steps)
            return
        for k in range(left + 1):
            extend([*prefix, k], left - k)

    extend([], steps)
    return [np.clip(p, MIN_SHARE, None) / np.clip(p, MIN_SHARE, None).sum() for p in points]


def level_plan(stream: StreamSpec) -> dict[str, Any]:
    """What ``plan --config`` says about a places stream's levels: per level, its places, its
    share now, and the relative std of its consistent counts now, with the shares that are
    best for the deepest level and for every level alike (stds relative to one place's release
    under the whole budget, as with equal shares and no projection)."""
    places = stream.counters.places
    assert places is not None
    tree = places.tree
    definition: Definition = "pure" if stream.rho is None else "zcdp"
    levels = len(tree.level_bounds)
    written = stream.counters.level_weights
    now = np.array([float(w) for w in written]) if written else np.ones(levels)
    now = now / now.sum()
    deepest = optimal_level_weights(tree, definition, target=levels - 1)
    alike = optimal_level_weights(tree, definition, target=None)
    columns = {
        label: (weights, consistent_level_errors(tree, weights, definition))
        for label, weights in (("now", now), ("best_deepest", deepest), ("best_levels", alike))
    }
    rows = []
    for level, (start, stop) in enumerate(tree.level_bounds):
        row: dict[str, float] = {"level": level, "places": stop - start}
        for label, (weights, errors) in columns.items():
            row[f"share_{label}"] = float(weights[level])
            row[f"std_{label}"] = float(np.sqrt(errors[level]))
        rows.append(row)
    return {"definition": definition, "levels": rows}


def render_level_plan(name: str, plan: dict[str, Any]) -> str:
    """:func:`level_plan` as a table for ``plan --config``."""
    lines = [
        (
            f"stream {name}: level shares of the budget and the std of each level's consistent "
            "counts (x the std of one place's release with the whole budget); paste a column "
            "of shares as counters.level_weights"
        ),
        (
            f"{'level':>5}  {'places':>7}  {'share now':>9}  {'std':>6}  "
            f"{'best deepest':>12}  {'std':>6}  {'best levels':>11}  {'std':>6}"
        ),
    ]
    lines += [
        f"{row['level']:>5}  {row['places']:>7}  {row['share_now']:>9.3f}  "
        f"{row['std_now']:>6.3f}  {row['share_best_deepest']:>12.3f}  "
        f"{row['std_best_deepest']:>6.3f}  {row['share_best_levels']:>11.3f}  "
        f"{row['std_best_levels']:>6.3f}"
        for row in plan["levels"]
    ]
    return "\n".join(lines)
