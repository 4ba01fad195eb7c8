"""The multi-consistency approximation method (seed 004, eq. 8 and Algorithm 1).

Split the constraint rows into groups; the optimal consistent release of the whole problem is
the limit of projecting onto each group in turn,

    y = lim_{t -> inf} (f_k o ... o f_2 o f_1)^t (x),

for any split (seed 004 section 6; von Neumann / Halperin alternating projections in the
inner product of the noise weights). Each ``f_g`` handles all the disjoint sub-problems of a
group at once (vectorised), e.g. every item's tree, or every day's combo projection.

Stopping rule (seed 004 section 8.2): stop after the first sweep whose mean absolute change is
below ``tol`` (default 1e-6). The result reports the number of sweeps, the consistency deviation
after every sweep (seed 004 eq. 14, via a problem-supplied residual) and the final residual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
Projection = Callable[[FloatArray], FloatArray]
Residual = Callable[[FloatArray], FloatArray]


@dataclass(frozen=True)
class ApproximationResult:
    """Outcome of the approximation method.

    Attributes:
        values: the final iterate, same shape as the input.
        iterations: number of full sweeps performed.
        deviations: consistency deviation after each sweep (seed 004 eq. 14: mean of the squared
            constraint residuals), length ``iterations``.
        changes: mean absolute change of each sweep, length ``iterations``.
        residual: largest absolute constraint residual of ``values``.
        converged: whether the stopping rule was met within ``max_iter`` sweeps.
    """

    values: FloatArray
    iterations: int
    deviations: tuple[float, ...]
    changes: tuple[float, ...]
    residual: float
    converged: bool


def alternating_projections(
    values: npt.ArrayLike,
    projections: Sequence[Projection],
    residual: Residual,
    *,
    tol: float = 1e-6,
    max_iter: int = 10_000,
    deviation_scale: float | None = None,
) -> ApproximationResult:
    """Project onto each group in turn until the mean absolute change of a sweep is < ``tol``.

    Args:
        values: starting point (the noisy release), any shape.
        projections: ``f_1 .. f_k``, each the optimal consistent release of one group of
            constraints (must be projections in one common inner product).
        residual: maps values to the vector of all constraint residuals ``C y - b``.
        tol: stopping threshold on the mean absolute change of one sweep.
        max_iter: most sweeps to run.
        deviation_scale: divisor of the summed squared residuals in eq. 14 (seed 004 uses
            ``c |T|``, items x days); defaults to the number of residuals.

    Returns:
        An :class:`ApproximationResult`.
    """
    if tol <= 0 or max_iter < 1 or not projections:
        raise ConfigError(
            "need tol > 0, max_iter >= 1 and at least one group; "
            f"got tol={tol}, max_iter={max_iter}"
        )
    x = np.array(values, dtype=np.float64)
    deviations: list[float] = []
    changes: list[float] = []
    converged = False
    for _ in range(max_iter):
        before = x
        for project in projections:
            x = project(x)
        change = float(np.mean(np.abs(x - before)))
        r = residual(x)
        scale = float(r.size if deviation_scale is None else deviation_scale)
        deviations.append(float(np.sum(r * r)) / max(scale, 1.0))
        changes.append(change)
        if change < tol:
            converged = True
            break
    r = residual(x)
    return ApproximationResult(
        values=x,
        iterations=len(changes),
        deviations=tuple(deviations),
        changes=tuple(changes),
        residual=float(np.max(np.abs(r))) if r.size else 0.0,
        converged=converged,
    )
