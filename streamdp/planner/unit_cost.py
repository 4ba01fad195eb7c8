"""What a privacy unit's bounds cost in accuracy (issue 28).

A stream protecting a unit (a patient) counts at most ``a`` records of it per period in at most
``b`` periods of an epoch, and calibrates its noise on ``M = a b`` times one event's
sensitivity. Tight bounds drop the records of heavy units; loose ones add noise for every
count. :func:`unit_costs` plans the stream at alternative bounds around the chosen ones, through
the planner's own computation (``plan_at(M)``: the plan at multiplier ``M``), so an operator
sees the trade before choosing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from streamdp.planner.accuracy import Plan


@dataclass(frozen=True)
class UnitCost:
    """The plan at bounds ``(per_period, periods)``: multiplier ``M`` and the standard
    deviations of the running total (mean and max over the horizon)."""

    per_period: int
    periods: int
    multiplier: int
    sensitivity: float
    mean_std: float
    max_std: float
    chosen: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "max_events_per_period": self.per_period,
            "max_periods_per_epoch": self.periods,
            "multiplier": self.multiplier,
            "sensitivity": self.sensitivity,
            "mean_std": self.mean_std,
            "max_std": self.max_std,
            "chosen": self.chosen,
        }


def alternative_bounds(per_period: int, periods: int, horizon: int) -> list[tuple[int, int]]:
    """The bounds to compare: one event (1, 1), then per period in {1, a, 2a} times periods
    in {b/2, b, 2b} (at least 1, at most the horizon), in increasing multiplier."""
    pairs = {(1, 1)}
    for a in {1, per_period, 2 * per_period}:
        for b in {max(1, periods // 2), periods, min(horizon, 2 * periods)}:
            pairs.add((a, b))
    return sorted(pairs, key=lambda p: (p[0] * p[1], p))


def unit_costs(
    plan_at: Callable[[int], Plan], per_period: int, periods: int, horizon: int
) -> list[UnitCost]:
    """The plan at every :func:`alternative_bounds`, computed by ``plan_at(M)``."""
    rows = []
    for a, b in alternative_bounds(per_period, periods, horizon):
        result = plan_at(a * b)
        rows.append(
            UnitCost(
                a,
                b,
                a * b,
                result.sensitivity,
                math.sqrt(result.mean_variance),
                math.sqrt(result.max_variance),
                (a, b) == (per_period, periods),
            )
        )
    return rows


def render_unit_costs(rows: list[UnitCost], field: str) -> str:
    """The comparison as a table, with each row's error relative to one event's."""
    event = next(r for r in rows if r.multiplier == 1)
    lines = [
        f"cost of the privacy unit's bounds ({field}): records per period x periods per epoch",
        (
            f"{'per period':>10} {'periods':>8} {'M':>5} {'sens.':>7} {'mean std':>9} "
            f"{'max std':>9} {'x event':>8}"
        ),
    ]
    for r in rows:
        mark = "  <- chosen" if r.chosen else ""
        lines.append(
            f"{r.per_period:>10} {r.periods:>8} {r.multiplier:>5} {r.sensitivity:>7g} "
            f"{r.mean_std:>9.4g} {r.max_std:>9.4g} {r.mean_std / event.mean_std:>8.3g}{mark}"
        )
    lines += [
        "M = per period x periods: the most records one unit adds to an epoch. The noise is",
        "calibrated on M x one event's sensitivity, so every standard deviation grows with M;",
        "records beyond the bounds are not counted at all (tight bounds undercount heavy units)",
    ]
    return "\n".join(lines)
