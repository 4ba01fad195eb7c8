"""Attribute weights for a census stream (issue 29; seed 002's heterogeneous allocation): the
shares of the budget over the total, each attribute's marginal and the cells that minimise the
error of the consistent cells, or of every group alike.

Group ``g``'s node variance is the whole-budget one times a factor of its share
(:func:`~streamdp.planner.shares.group_variance_factors`); after the census projection (GLS
under those variances) the values of one group share a multiple of it, in closed form
(:func:`~streamdp.consistency.census.census_projected_variances`), the same for every node and
period. Seed 002 allocates by each attribute's entropy in the data; the planner reads only the
public spec (the categories), never the data, so its shares cost no budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from streamdp.consistency.census import census_projected_variances
from streamdp.planner.shares import Definition, group_variance_factors, optimal_shares

if TYPE_CHECKING:
    from streamdp.engine.spec import StreamSpec

FloatArray = npt.NDArray[np.float64]


def consistent_group_errors(
    sizes: Sequence[int], weights: npt.ArrayLike, definition: Definition
) -> FloatArray:
    """Variance of each group's consistent values (total, each marginal, cells) under
    ``weights``, over the whole-budget variance of one counter's release (equal weights and no
    projection give 1), shape (k + 2,)."""
    factors = group_variance_factors(weights, definition)
    k = len(sizes)
    total, marginals, cells = census_projected_variances(
        sizes, factors[:1], factors[None, 1 : k + 1], factors[k + 1 :]
    )
    return np.concatenate([total, marginals[0], cells])


def objective_value(
    sizes: Sequence[int], weights: npt.ArrayLike, definition: Definition, target: int | None
) -> float:
    """Consistent variance of group ``target`` (``k + 1``: the cells); None: the mean over
    the groups (every group counts alike, however many values it has)."""
    errors = consistent_group_errors(sizes, weights, definition)
    return float(errors.mean() if target is None else errors[target])


def optimal_attribute_weights(
    sizes: Sequence[int], definition: Definition, target: int | None = None
) -> FloatArray:
    """The shares (total, each attribute, cells; adding up to one) that minimise
    :func:`objective_value` for ``target``."""
    groups = len(sizes) + 2
    if target is not None and not 0 <= target < groups:
        raise ValueError(f"target group must be in 0..{groups - 1}, got {target}")
    return optimal_shares(
        lambda w: objective_value(sizes, w, definition, target), groups, definition
    )


def attribute_plan(stream: StreamSpec) -> dict[str, Any]:
    """What ``plan --config`` says about a census stream's groups: per group, its values, its
    share now and the relative std of its consistent values now, with the shares best for the
    cells and for every group alike (stds relative to one counter's release under the whole
    budget, as with equal shares and no projection)."""
    attributes = stream.counters.attributes
    sizes = [len(a.categories) for a in attributes]
    names = ["total", *(a.name for a in attributes), "cells"]
    counts = [1, *sizes, int(np.prod(sizes))]
    definition: Definition = "pure" if stream.rho is None else "zcdp"
    written = stream.counters.attribute_weights
    now = np.array([float(w) for w in written]) if written else np.ones(len(names))
    now = now / now.sum()
    columns = {
        "now": now,
        "best_cells": optimal_attribute_weights(sizes, definition, target=len(names) - 1),
        "best_groups": optimal_attribute_weights(sizes, definition, target=None),
    }
    errors = {label: consistent_group_errors(sizes, w, definition) for label, w in columns.items()}
    rows = []
    for g, (name, count) in enumerate(zip(names, counts, strict=True)):
        row: dict[str, Any] = {"group": name, "values": count}
        for label, weights in columns.items():
            row[f"share_{label}"] = float(weights[g])
            row[f"std_{label}"] = float(np.sqrt(errors[label][g]))
        rows.append(row)
    return {"definition": definition, "groups": rows}


def render_attribute_plan(name: str, plan: dict[str, Any]) -> str:
    """:func:`attribute_plan` as a table for ``plan --config``."""
    lines = [
        (
            f"stream {name}: group shares of the budget and the std of each group's consistent "
            "values (x the std of one counter's release with the whole budget); write a column "
            "of shares as counters.attribute_weights"
        ),
        (
            f"{'group':>8}  {'values':>6}  {'share now':>9}  {'std':>6}  "
            f"{'best cells':>10}  {'std':>6}  {'best groups':>11}  {'std':>6}"
        ),
    ]
    lines += [
        f"{row['group']:>8}  {row['values']:>6}  {row['share_now']:>9.4f}  "
        f"{row['std_now']:>6.3f}  {row['share_best_cells']:>10.4f}  "
        f"{row['std_best_cells']:>6.3f}  {row['share_best_groups']:>11.4f}  "
        f"{row['std_best_groups']:>6.3f}"
        for row in plan["groups"]
    ]
    return "\n".join(lines)
