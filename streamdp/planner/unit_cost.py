"""What a privacy unit's bounds cost in accuracy (issue 28).

A stream protecting a unit (a patient) counts at most ``a`` records of it per period in at most
``b`` periods of an epoch, and calibrates its noise on ``M = a max(b, 2)`` times one event's
sensitivity (:func:`streamdp.engine.privacy_unit.unit_multiplier`: one record carrying a
unit's identifier can move ``2a`` of its records). Tight bounds drop the records of heavy
units; loose ones add noise for every count. :func:`unit_costs` plans the stream at
alternative bounds around the chosen ones, through the planner's own computation
(``plan_at(M)``: the plan at multiplier ``M``), so an operator sees the trade before
choosing. :func:`describe_unit` says in words what the plan protects and what its noise is
calibrated on (``plan --max-events-per-period A --max-periods-per-epoch B``, or a spec's
``privacy_unit``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from streamdp.engine.privacy_unit import unit_multiplier
from streamdp.planner.accuracy import Plan
from streamdp.planner.text_table import aligned_rows
from streamdp.planner.zcdp import l2_squared_of


@dataclass(frozen=True)
class UnitCost:
    """The plan at bounds ``(per_period, periods)``: multiplier ``M``, the sensitivity the
    noise is calibrated on (``M`` times one event's), the standard deviations of the running
    total (mean and max over the horizon) and its 95% error bound at the horizon."""

    per_period: int
    periods: int
    multiplier: int
    sensitivity: float
    mean_std: float
    max_std: float
    chosen: bool
    error95: float = math.nan

    def as_dict(self) -> dict[str, object]:
        return {
            "max_events_per_period": self.per_period,
            "max_periods_per_epoch": self.periods,
            "multiplier": self.multiplier,
            "sensitivity": self.sensitivity,
            "mean_std": self.mean_std,
            "max_std": self.max_std,
            "error95_at_horizon": self.error95,
            "chosen": self.chosen,
        }


def alternative_bounds(per_period: int, periods: int, horizon: int) -> list[tuple[int, int]]:
    """The unit bounds to compare: per period in {1, a, 2a} times periods in {b/2, b, 2b} (at
    least 1, at most the horizon), in increasing multiplier."""
    pairs = set()
    for a in {1, per_period, 2 * per_period}:
        for b in {max(1, periods // 2), periods, min(horizon, 2 * periods)}:
            pairs.add((a, b))
    return sorted(pairs, key=lambda p: (unit_multiplier(*p), p))


def unit_costs(
    plan_at: Callable[[int], Plan], per_period: int, periods: int, horizon: int
) -> list[UnitCost]:
    """The plan for one event (the first row: ``M = 1``, shown as bounds 1 x 1), then at every
    :func:`alternative_bounds`, each computed by ``plan_at(M)``."""
    rows = []
    bounds = [(1, 1, 1)] + [
        (a, b, unit_multiplier(a, b)) for a, b in alternative_bounds(per_period, periods, horizon)
    ]
    for index, (a, b, multiplier) in enumerate(bounds):
        result = plan_at(multiplier)
        last = [r.error95 for r in result.releases if r.t == result.horizon]
        rows.append(
            UnitCost(
                a,
                b,
                multiplier,
                result.sensitivity,
                math.sqrt(result.mean_variance),
                math.sqrt(result.max_variance),
                index > 0 and (a, b) == (per_period, periods),
                last[0] if last else math.nan,
            )
        )
    return rows


def render_unit_costs(rows: list[UnitCost], field: str | None = None) -> str:
    """The comparison as a table, with each row's error relative to one event's (``field``:
    the record field naming the unit, when known)."""
    event = next(r for r in rows if r.multiplier == 1)
    named = f" ({field})" if field else ""
    rows_text = [
        (
            *(("one event", "") if r is event else (str(r.per_period), str(r.periods))),
            str(r.multiplier),
            f"{r.sensitivity:.4g}",
            f"{r.mean_std:.4g}",
            f"{r.max_std:.4g}",
            f"{r.error95:.4g}",
            f"{r.mean_std / event.mean_std:.3g}",
            "<- chosen" if r.chosen else "",
        )
        for r in rows
    ]
    headers = ("per period", "periods", "M", "sens.", "mean std", "max std", "95% at N")
    lines = [
        f"cost of the privacy unit's bounds{named}: records per period x periods per epoch",
        *aligned_rows((*headers, "x event"), rows_text),
    ]
    lines += [
        "M = per period x max(periods, 2): the most records one unit adds to an epoch, or one",
        "record under its identifier moves (2 x per period). The noise is calibrated on M x one",
        "event's sensitivity, so every standard deviation grows with M;",
        "records beyond the bounds are not counted at all (tight bounds undercount heavy units).",
        "x event: mean std over one event's (M = 1); 95% at N: the running total's 95% error",
        "bound at the horizon",
    ]
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def describe_unit(
    per_period: int,
    periods: int,
    event_sensitivity: float,
    *,
    field: str | None = None,
    l2: bool = False,
    event_l2_squared: int | None = None,
) -> str:
    """Three lines saying what a plan at bounds ``(per_period, periods)`` protects and what its
    noise is calibrated on: ``M`` times one event's sensitivity (``l2``: its L2 bound, under
    zCDP, whose square is ``M^2`` times the event's: ``event_l2_squared`` when known exactly,
    else the largest integer at most ``event_sensitivity^2``)."""
    multiplier = unit_multiplier(per_period, periods)
    who = f"one {field}" if field else "one privacy unit (a patient, a device)"
    if l2:
        # one event's changes are integers: its L2^2 is the integer at most Delta_2^2
        event_squared = (
            l2_squared_of(event_sensitivity) if event_l2_squared is None else event_l2_squared
        )
        squared = event_squared * multiplier * multiplier
        calibrated = (
            f"noise calibrated on the L2 sensitivity M x Delta_2 = {multiplier} x "
            f"{math.sqrt(event_squared):.6g} = {math.sqrt(squared):.6g} "
            f"(L2^2 = M^2 x {event_squared} = {squared})"
        )
    else:
        calibrated = (
            f"noise calibrated on sensitivity M x Delta = {multiplier} x {event_sensitivity:g} "
            f"= {multiplier * event_sensitivity:g}"
        )
    who_and_bounds = (
        f"protects {who} per epoch, not one event: at most {_count(per_period, 'record')} in "
        f"each of at most {_count(periods, 'period')},"
    )
    records = (
        f"M = {per_period} x {periods} = {_count(multiplier, 'record')} per unit per epoch"
        if periods >= 2
        else f"M = {per_period} x 2 = {_count(multiplier, 'record')} (one period per epoch: a "
        "record under a unit's identifier can move its records to another period, as many "
        "as 2 periods' worth)"
    )
    return "\n".join(
        (who_and_bounds, f"{records}; {calibrated}", "(every error shown is the unit-level plan's)")
    )


def unit_summary(
    per_period: int, periods: int, event_sensitivity: float, field: str | None = None
) -> dict[str, object]:
    """The bounds a plan was made at, as JSON: ``M`` and one event's sensitivity (the plan's
    own ``sensitivity`` is ``M`` times it)."""
    data: dict[str, object] = {} if field is None else {"field": field}
    return {
        **data,
        "max_events_per_period": per_period,
        "max_periods_per_epoch": periods,
        "multiplier": unit_multiplier(per_period, periods),
        "event_sensitivity": event_sensitivity,
    }
