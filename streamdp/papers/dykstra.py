"""Inequality constraints by Dykstra's alternating projections (seed 004's open question).

Non-negative counts, and non-decreasing running totals (equivalently: non-negative period
counts), on top of the equality constraints. The feasible set is the intersection of the
affine consistent set with a convex cone; Dykstra's algorithm (Boyle and Dykstra 1986) finds
the exact projection onto the intersection from the two projections, keeping a correction
term per set. Unlike the equality-only release this estimate is biased (it pulls small counts
up from below zero), and in exchange its error is lower where true counts are near zero; the
benchmark ``benchmarks/consistency_inequality.py`` measures both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
Projection = Callable[[FloatArray], FloatArray]


@dataclass(frozen=True)
class DykstraResult:
    """values: the projection onto the intersection; iterations: sweeps; converged: met tol."""

    values: FloatArray
    iterations: int
    converged: bool


def dykstra(
    values: npt.ArrayLike,
    projections: Sequence[Projection],
    *,
    tol: float = 1e-9,
    max_iter: int = 10_000,
) -> DykstraResult:
    """Projection of ``values`` onto the intersection of convex sets (Euclidean metric).

    Args:
        values: the point to project, any shape.
        projections: exact Euclidean projections onto each convex set.
        tol: stop when the largest change of a sweep is below ``tol`` (times max(1, |x|_inf)).
        max_iter: most sweeps.

    Returns:
        A :class:`DykstraResult`.
    """
    if not projections or tol <= 0 or max_iter < 1:
        raise ConfigError(
            "dykstra needs at least one projection, tol > 0 and max_iter >= 1, got "
            f"{len(projections)} projections, tol {tol}, max_iter {max_iter}"
        )
    x = np.array(values, dtype=np.float64)
    corrections = [np.zeros_like(x) for _ in projections]
    for sweep in range(1, max_iter + 1):
        before = x
        for g, project in enumerate(projections):
            y = project(x + corrections[g])
            corrections[g] = x + corrections[g] - y
            x = y
        if float(np.max(np.abs(x - before))) < tol * max(1.0, float(np.max(np.abs(x)))):
            return DykstraResult(x, sweep, True)
    return DykstraResult(x, max_iter, False)


def project_nonnegative(values: FloatArray) -> FloatArray:
    """Projection onto the non-negative orthant."""
    out: FloatArray = np.maximum(values, 0.0)
    return out


def project_nondecreasing(values: npt.ArrayLike) -> FloatArray:
    """Isotonic regression of every row (last axis) by pool-adjacent-violators, O(T) per row.

    The Euclidean projection of a noisy running-total series onto non-decreasing series.
    """
    v = np.asarray(values, dtype=np.float64)
    flat = v.reshape(-1, v.shape[-1]) if v.ndim else v.reshape(1, 1)
    out = np.empty_like(flat)
    for r, row in enumerate(flat):
        means: list[float] = []
        counts: list[int] = []
        for value in row:
            mean, count = float(value), 1
            while means and means[-1] > mean:
                prev_mean, prev_count = means.pop(), counts.pop()
                mean = (prev_mean * prev_count + mean * count) / (prev_count + count)
                count += prev_count
            means.append(mean)
            counts.append(count)
        out[r] = np.repeat(means, counts)
    return out.reshape(v.shape)


def nonnegative_release(
    values: npt.ArrayLike,
    project_consistent: Projection,
    *,
    tol: float = 1e-9,
    max_iter: int = 10_000,
) -> DykstraResult:
    """Closest consistent release whose values are all >= 0 (unweighted).

    ``project_consistent`` is an exact unweighted projection onto the equality constraints,
    e.g. ``lambda v: restaurant_release(v, combos)`` or a census projection. For a count tree,
    non-negative days make every node and every running total non-decreasing in time.
    """
    return dykstra(values, [project_consistent, project_nonnegative], tol=tol, max_iter=max_iter)
