"""What ``streamdp plan`` prints for people: a plan's table, a comparison, one row per stream.

Formatting only; the numbers come from :mod:`streamdp.planner.accuracy` and
:mod:`streamdp.planner.target`. :class:`StreamPlan` is also the JSON shape of a spec's plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Any, cast

from streamdp.error_band import half_width95
from streamdp.planner.accuracy import Plan
from streamdp.planner.target import planned_std


def _describe(result: Plan) -> str:
    if result.branching is None:
        return result.mechanism
    budgets = "/".join(f"{b:.3f}" for b in result.level_budgets)
    return f"{result.mechanism} (k={result.branching}, level budgets {budgets})"


def _significant(value: object, digits: int, rounding: str) -> str:
    """``value`` to ``digits`` significant digits, rounded with ``rounding``: a privacy loss
    is shown rounded up (never below what is spent), a budget to paste rounded down."""
    number = float(cast(float, value))  # a plan's figures are floats (or ints)
    rounded = Context(prec=digits, rounding=rounding).plus(Decimal(repr(number)))
    return f"{rounded.normalize():f}" if abs(rounded.adjusted()) < 6 else f"{rounded:E}"


def loss_text(value: object, digits: int = 6) -> str:
    """An epsilon (a privacy loss) for people: rounded up."""
    return _significant(value, digits, ROUND_CEILING)


def _privacy(result: Plan) -> str:
    privacy = result.privacy
    if privacy.get("definition") == "zcdp":
        return (
            f"rho {privacy['rho']:g} (zCDP; (epsilon {loss_text(privacy['epsilon'])}, delta "
            f"{privacy['delta']:g})-DP)  L2"
        )
    return f"epsilon {result.epsilon:g}"


def _blt_working_state(result: Plan) -> str:
    """The BLT's working state per counter: ``d`` encoding and ``d`` decoding buffers and the
    running total (``2d + 1``)."""
    working = result.working_state_per_counter
    assert working is not None
    return f"{working} numbers ({(working - 1) // 2} buffers), whatever the horizon"


def render_table(result: Plan) -> str:
    """Human-readable summary with the 95% error bound of the running total at a few t."""
    lines = [
        (
            f"mechanism {_describe(result)}  objective {result.objective}  "
            f"horizon {result.horizon}  {_privacy(result)}  "
            f"sensitivity {result.sensitivity:g}  noise {result.noise}"
        ),
        (
            f"running-total variance: mean {result.mean_variance:.6g}  "
            f"max {result.max_variance:.6g}  (std: mean-variance "
            f"{math.sqrt(result.mean_variance):.4g}, max {math.sqrt(result.max_variance):.4g}; "
            "units: counts)"
        ),
        (
            f"period-count variance: mean {result.mean_count_variance:.6g}  "
            f"max {result.max_count_variance:.6g}"
        ),
        f"stored noisy values per counter per epoch: {result.state_values_per_counter}"
        + (
            f"; working state per counter: {_blt_working_state(result)}"
            if result.mechanism == "blt"
            else ""
        ),
        "",
        f"{'t':>10}  {'std of total':>14}  {'95% error bound':>16}  {'published band +-':>18}",
    ]
    lines += [
        f"{r.t:>10}  {r.total_std:>14.4g}  {r.error95:>16.4g}  {half_width95(r.total_std):>18.6g}"
        for r in result.releases
    ]
    lines.append("")
    how = (
        "the exact discrete Gaussian noise law (normal quantile when more than 64 noise terms "
        "are combined; the BLT's rounding bias added)"
        if result.privacy.get("definition") == "zcdp"
        else "the exact noise distribution (normal quantile when more than 64 nodes are combined)"
    )
    lines.append(
        f"95% bound: P(|noisy total - true total| <= bound) >= 0.95, from {how}. Published band: "
        "the 95% interval the releases' readers draw (feed page, dashboards, docs/consuming.md "
        "section 4), 2.12 std + 1, which holds on every read path and so is a little wider."
    )
    return "\n".join(lines)


def render_comparison(results: list[Plan]) -> str:
    """One row per mechanism: running-total and period-count variances, state per counter;
    with zCDP rows (``plan --compare --delta``), each row's definition and noise."""
    first = results[0]
    zcdp = [r for r in results if r.privacy.get("definition") == "zcdp"]
    if not zcdp:
        header = (
            f"horizon {first.horizon}  epsilon {first.epsilon:g}  "
            f"sensitivity {first.sensitivity:g}  noise {first.noise}  (variances in counts^2)"
        )
    else:
        pure = [r for r in results if r not in zcdp]
        matched = zcdp[0].privacy
        header = (
            f"horizon {first.horizon}  matched (epsilon {pure[0].epsilon if pure else ''}, "
            f"delta {matched['delta']:g}): pure rows epsilon-DP, discrete Laplace, L1 "
            f"sensitivity {pure[0].sensitivity if pure else '-'}; zCDP rows rho "
            f"{_significant(matched['rho'], 6, ROUND_FLOOR)} (epsilon "
            f"{loss_text(matched['epsilon'])} at that delta), discrete "
            f"Gaussian, L2 sensitivity {zcdp[0].sensitivity:g}  (variances in counts^2)"
        )
    lines = [
        header,
        "",
        (
            f"{'definition':<10} {'mechanism':<13} {'objective':<9} {'k':>3} {'mean total':>12} "
            f"{'max total':>12} {'mean count':>12} {'stored/counter':>15}"
        ),
    ]
    for r in results:
        k = "" if r.branching is None else str(r.branching)
        definition = "zCDP" if r in zcdp else "pure"
        lines.append(
            f"{definition:<10} {r.mechanism:<13} {r.objective:<9} {k:>3} "
            f"{r.mean_variance:>12.6g} {r.max_variance:>12.6g} {r.mean_count_variance:>12.6g} "
            f"{r.state_values_per_counter:>15}"
        )
    blt = next((r for r in results if r.mechanism == "blt"), None)
    if blt is not None:
        note = (
            "stored/counter: noisy values stored per counter per epoch; blt also keeps a "
            f"working state of {_blt_working_state(blt)}"
        )
        lines += ["", note]
    return "\n".join(lines)


@dataclass(frozen=True)
class StreamPlan:
    """The plan of one stream of a spec (``target_epsilon`` set under ``--target-std``)."""

    stream: str
    plan: Plan
    target_epsilon: Decimal | None = None

    def as_dict(self) -> dict[str, Any]:
        data = {"stream": self.stream, **self.plan.as_dict()}
        data["period_count_std"] = math.sqrt(self.plan.mean_count_variance)
        if self.target_epsilon is not None:
            data["epsilon_for_target"] = str(self.target_epsilon)
            data["planned_std"] = planned_std(self.plan)
        return data


def render_streams(rows: list[StreamPlan], target: float | None) -> str:
    """One row per stream: mechanism, horizon, epsilon, sensitivity, standard deviations."""
    head = (
        f"{'stream':<22} {'mechanism':<18} {'N':>6} {'epsilon':>8} {'sens.':>5} "
        f"{'mean std':>9} {'max std':>9} {'count std':>9}"
    )
    lines = [head]
    for row in rows:
        r = row.plan
        mechanism = r.mechanism if r.objective == "total" else f"{r.mechanism}/{r.objective}"
        if r.privacy.get("definition") == "zcdp":
            mechanism += " (zCDP)"
        lines.append(
            f"{row.stream:<22} {mechanism:<18} {r.horizon:>6} {loss_text(r.epsilon, 4):>8} "
            f"{r.sensitivity:>5g} {math.sqrt(r.mean_variance):>9.4g} "
            f"{math.sqrt(r.max_variance):>9.4g} {math.sqrt(r.mean_count_variance):>9.4g}"
        )
    lines.append("")
    if target is not None:
        lines += [
            "epsilon: per epoch (event-level), the smallest with 3 digits for a standard",
            f"deviation of at most {target:g} (of the mean running total; the worst one for",
            "minimax; the mean period count for count); the other columns are at that epsilon",
        ]
    else:
        lines += [
            "epsilon: per epoch, per event (per unit for a stream with a privacy unit, whose sens.",
            "is the unit's); standard deviations in counts: mean and max over",
            "the horizon of the running total's, mean of the period count's",
        ]
    if any(row.plan.privacy.get("definition") == "zcdp" for row in rows):
        lines += [
            "(zCDP): the stream spends rho; its epsilon is the (epsilon, delta) bound of that rho",
            "at the delta its spec states, and its sens. the L2 bound of one event",
        ]
    return "\n".join(lines)
