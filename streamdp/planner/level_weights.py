"""Level weights for a places stream (issue 29; seed 002): the shares of the budget that
minimise the error of the consistent counts of one level (the counties, say) or of every level
alike.

Level ``l``'s node variance is the whole-budget one times a factor of its share
(:func:`~streamdp.planner.shares.group_variance_factors`). After the tree projection (GLS
under those variances) each place keeps a multiple ``f_v(w)`` of it
(:func:`~streamdp.consistency.tree.tree_projection_variances`), the same multiple for every
node and period. The objective is the mean of ``f_v`` over the target places, minimised on the
simplex (:func:`~streamdp.planner.shares.optimal_shares`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from streamdp.consistency.tree import Tree, tree_projection_variances
from streamdp.planner.shares import Definition, group_variance_factors, optimal_shares

if TYPE_CHECKING:
    from streamdp.engine.spec import StreamSpec

FloatArray = npt.NDArray[np.float64]


def consistent_level_errors(
    tree: Tree, weights: npt.ArrayLike, definition: Definition
) -> FloatArray:
    """Mean variance of each level's consistent counts under ``weights``, per level, over the
    whole-budget variance of one place's release (equal weights and no projection give 1)."""
    depth = tree.depth
    factors = group_variance_factors(weights, definition)
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
    for ``target`` (a level; None: every level alike)."""
    levels = len(tree.level_bounds)
    if target is not None and not 0 <= target < levels:
        raise ValueError(f"target level must be in 0..{levels - 1}, got {target}")
    return optimal_shares(
        lambda w: objective_value(tree, w, definition, target), levels, definition
    )


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
        f"{row['level']:>5}  {row['places']:>7}  {row['share_now']:>9.4g}  "
        f"{row['std_now']:>6.3f}  {row['share_best_deepest']:>12.4g}  "
        f"{row['std_best_deepest']:>6.3f}  {row['share_best_levels']:>11.4g}  "
        f"{row['std_best_levels']:>6.3f}"
        for row in plan["levels"]
    ]
    return "\n".join(lines)
