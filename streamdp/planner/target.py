"""The planner turned round: the epsilon a configuration needs for a target standard deviation.

:func:`planned_std` is the standard deviation a plan's objective minimises;
:func:`epsilon_for_std` finds the smallest epsilon (with a few significant digits, a value a
spec holds exactly) at which it meets a target.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

from streamdp.errors import ConfigError
from streamdp.planner.accuracy import Plan, plan


def planned_std(result: Plan) -> float:
    """The standard deviation ``result``'s objective minimises (counts): the mean running-total
    variance's root for ``total``, the largest running total's for ``minimax``, the mean
    period count's for ``count``."""
    if result.objective == "minimax":
        return math.sqrt(result.max_variance)
    if result.objective == "count":
        return math.sqrt(result.mean_count_variance)
    return math.sqrt(result.mean_variance)


def epsilon_for_std(  # noqa: PLR0917 - plan()'s parameters, target first
    target_std: float,
    mechanism: str,
    objective: str,
    horizon: int,
    sensitivity: float,
    noise: str = "discrete-laplace",
    *,
    branching: int | None = None,
    digits: int = 3,
) -> tuple[Decimal, Plan]:
    """The smallest epsilon per epoch with ``digits`` significant digits (a value a spec holds
    exactly) at which :func:`planned_std` is at most ``target_std``, and the plan at it.

    Every node's Laplace scale is ``Delta / (epsilon lambda_i)`` with weights ``lambda_i`` that
    do not depend on epsilon, so for continuous Laplace noise every variance is exactly
    ``V(1) / epsilon^2`` and ``epsilon = std(1) / target`` solves it. The discrete noise's
    variance is at most the continuous one of the same scale (much less once scales fall below
    one count), and scales are rounded up for exact budgets; the variance still falls as
    epsilon grows, so the answer is found by bisection on the planner's own variance for
    ``noise`` below that solution, then rounded up and checked.
    """
    if not (math.isfinite(target_std) and target_std > 0):
        raise ConfigError(f"the target standard deviation must be a number > 0, got {target_std!r}")
    if not 1 <= digits <= 15:
        raise ConfigError(f"digits must be in 1..15, got {digits!r}")

    def std_at(epsilon: float) -> float:
        return planned_std(
            plan(
                mechanism,
                objective,
                horizon,
                epsilon,
                sensitivity,
                noise,
                points=[1],
                branching=branching,
            )
        )

    continuous = plan(
        mechanism, objective, horizon, 1.0, sensitivity, "laplace", points=[1], branching=branching
    )
    high = planned_std(continuous) / target_std
    while std_at(high) > target_std:  # only by the rounding of scales: a step or two
        high *= 1.0 + 1e-6
    low = high / 2.0
    for _ in range(200):
        if std_at(low) > target_std:
            break
        high, low = low, low / 2.0
    for _ in range(60):  # std_at(low) > target >= std_at(high)
        middle = 0.5 * (low + high)
        if std_at(middle) > target_std:
            low = middle
        else:
            high = middle
        if high - low <= high * 1e-9:
            break
    exact = Decimal(repr(high))
    step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    epsilon = (exact / step).to_integral_value(rounding=ROUND_CEILING) * step
    while std_at(float(epsilon)) > target_std:  # rounding up keeps it met; checked anyway
        epsilon += step
    result = plan(
        mechanism, objective, horizon, float(epsilon), sensitivity, noise, branching=branching
    )
    return epsilon, result
