"""``streamdp plan --config SPEC.toml``: every stream of a spec planned with its own values.

Each stream is planned with its mechanism, objective, horizon, budget and sensitivity (at its
privacy unit's multiplier when it has one), followed by what a privacy unit's bounds cost, and
the weights of a places stream's levels or a census stream's attribute groups. The one-stream
flags of ``streamdp plan`` live in :mod:`streamdp.planner.flags`; :mod:`streamdp.planner.cli`
calls this module.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from streamdp.continual.definitions import DEFAULT_DELTA
from streamdp.continual.lattice_blt import counters_touched
from streamdp.errors import ConfigError
from streamdp.planner.accuracy import Plan, compare, plan
from streamdp.planner.report import StreamPlan, render_comparison, render_streams
from streamdp.planner.target import epsilon_for_std
from streamdp.planner.unit_cost import (
    UnitCost,
    describe_unit,
    render_unit_costs,
    unit_costs,
    unit_summary,
)
from streamdp.planner.zcdp import compare_definitions, plan_zcdp

if TYPE_CHECKING:
    from streamdp.engine.spec import EngineSpec, StreamSpec


def event_sensitivity(stream: StreamSpec) -> float:
    """One event's sensitivity the stream's noise is a multiple of: L1, or L2 under zCDP."""
    if stream.rho is not None:
        return math.sqrt(event_l2_squared(stream))
    return float(stream.sensitivity)


def event_l2_squared(stream: StreamSpec) -> int:
    """A zCDP stream's integer ``Delta_2^2`` of one event, exactly (the stream's ``L2^2`` is
    ``M^2`` times it; planning from its float square root would round it)."""
    return stream.l2_squared // (stream.unit_multiplier * stream.unit_multiplier)


def plan_stream_at(stream: StreamSpec, multiplier: int, noise: str) -> Plan:
    """The plan of ``stream`` with its noise calibrated on ``multiplier`` times one event's
    sensitivity (its own unit's multiplier: the stream as configured)."""
    if stream.rho is not None:
        return plan_zcdp(
            stream.mechanism,
            stream.objective,
            stream.horizon,
            Fraction(stream.rho),
            event_sensitivity(stream),
            delta=Fraction(stream.delta) if stream.delta is not None else DEFAULT_DELTA,
            branching=stream.branching,
            unit_multiplier=multiplier,
            event_l2_squared=event_l2_squared(stream),
            touched=(
                counters_touched(stream.sensitivity * multiplier, stream.counters.width)
                if stream.mechanism == "blt"
                else None
            ),
        )
    return plan(
        stream.mechanism,
        stream.objective,
        stream.horizon,
        float(stream.epsilon),
        float(stream.sensitivity * multiplier),
        noise,
        branching=stream.branching,
    )


def stream_unit_costs(stream: StreamSpec, noise: str) -> list[UnitCost]:
    """The stream planned at alternative privacy-unit bounds (:mod:`unit_cost`)."""
    unit = stream.privacy_unit
    assert unit is not None
    return unit_costs(
        lambda multiplier: plan_stream_at(stream, multiplier, noise),
        unit.max_events_per_period,
        unit.max_periods_per_epoch,
        stream.horizon,
    )


def compare_spec(spec: EngineSpec, noise: str, output_format: str) -> str:
    """Every mechanism for each stream's horizon, budget and sensitivity; a zCDP stream is
    compared under both definitions at its (epsilon, delta)."""
    out: list[str] = []
    data: dict[str, Any] = {}
    for name, stream in spec.streams.items():
        if stream.rho is not None:
            results = compare_definitions(
                stream.horizon,
                float(stream.epsilon),
                float(stream.noise_sensitivity),
                event_sensitivity(stream),
                Fraction(stream.delta) if stream.delta is not None else DEFAULT_DELTA,
                unit_multiplier=stream.unit_multiplier,
                event_l2_squared=event_l2_squared(stream),
                touched=counters_touched(stream.noise_sensitivity, stream.counters.width),
            )
        else:
            results = compare(
                stream.horizon,
                float(stream.epsilon),
                float(stream.noise_sensitivity),
                noise,
            )
        data[name] = [r.as_dict() for r in results]
        out += [f"stream {name}", render_comparison(results), ""]
    return json.dumps(data, indent=2) if output_format == "json" else "\n".join(out).rstrip()


def publication_factors(stream: StreamSpec) -> tuple[float, float] | None:
    """``(min, max)`` over the counters of ``sqrt(P_jj)``, the factor on a release's standard
    deviations when the stream projects its releases onto its constraints at publication (a
    k-ary or BLT stream with combos or a hierarchy); None when it does not."""
    from streamdp.kinds import stream_kind

    if not stream.projects_at_publication:
        return None
    diagonal = stream_kind(stream.counters.kind).projection_diagonal(stream)
    factors = [math.sqrt(min(max(float(d), 0.0), 1.0)) for d in diagonal]
    return min(factors), max(factors)


def group_plans(stream: StreamSpec, noise: str) -> list[tuple[str, Plan]]:
    """Per budget group (levels of a places stream with ``level_weights``, parts of a census
    stream with ``attribute_weights``), the plan of its releases: its noise is calibrated on
    its own share of the budget and its part of the contribution bound
    (:mod:`streamdp.engine.budget_groups`), exactly as the engine's; empty without groups."""
    from streamdp.engine.budget_groups import (
        budget_groups,
        group_epsilon,
        group_gaussian,
        group_sensitivity,
    )

    plans = []
    for group in budget_groups(stream):
        if stream.rho is None:
            planned = plan(
                stream.mechanism,
                stream.objective,
                stream.horizon,
                group_epsilon(stream, group),
                group_sensitivity(stream, group),
                noise,
                branching=stream.branching,
            )
        else:
            budget = group_gaussian(stream, group)
            planned = plan_zcdp(
                stream.mechanism,
                stream.objective,
                stream.horizon,
                budget.rho,
                math.sqrt(budget.l2_squared),  # shown; the integer square is passed exactly
                delta=Fraction(stream.delta) if stream.delta is not None else DEFAULT_DELTA,
                branching=stream.branching,
                event_l2_squared=budget.l2_squared,
            )
        plans.append((group.name, planned))
    return plans


def _publication_note(name: str, stream: StreamSpec) -> list[str]:
    factors = publication_factors(stream)
    if factors is None:
        return []
    low, high = factors
    constraint = stream.constraints.kind
    first = (
        f"stream {name}: releases are projected onto its {constraint} constraint when published,"
    )
    second = (
        f"so each counter's standard deviations are {low:.3f} to {high:.3f} times the row above"
    )
    return [first, second, "(the projection's sqrt(P_jj), per counter)"]


def _stream_plan(name: str, stream: StreamSpec, noise: str, target_std: float | None) -> StreamPlan:
    if target_std is None:
        return StreamPlan(name, plan_stream_at(stream, stream.unit_multiplier, noise))
    if stream.rho is not None:
        raise ConfigError(
            f"--target-std finds an epsilon; stream {name!r} is zCDP (it spends rho): "
            "plan it without --target-std, or with --rho and its flags"
        )
    epsilon, result = epsilon_for_std(
        target_std,
        stream.mechanism,
        stream.objective,
        stream.horizon,
        float(stream.noise_sensitivity),
        noise,
        branching=stream.branching,
    )
    return StreamPlan(name, result, epsilon)


def plan_spec(
    spec: EngineSpec, noise: str, output_format: str, target_std: float | None = None
) -> str:
    """Each stream's plan (or, with ``target_std``, the epsilon it needs), then, without a
    target, the cost of each privacy unit's bounds and the weights of level and attribute
    budget groups."""
    from streamdp.planner.attribute_weights import attribute_plan, render_attribute_plan
    from streamdp.planner.level_weights import level_plan, render_level_plan

    rows = [_stream_plan(name, s, noise, target_std) for name, s in spec.streams.items()]
    extras: dict[str, StreamSpec] = dict(spec.streams) if target_std is None else {}
    levels = {n: level_plan(s) for n, s in extras.items() if s.counters.places is not None}
    groups = {n: attribute_plan(s) for n, s in extras.items() if s.counters.kind == "attributes"}
    costs = {
        n: stream_unit_costs(s, noise) for n, s in extras.items() if s.privacy_unit is not None
    }
    if output_format == "json":
        plans = [r.as_dict() for r in rows]
        for entry in plans:
            name = str(entry["stream"])
            unit = spec.streams[name].privacy_unit
            if name in costs and unit is not None:
                entry["privacy_unit"] = unit_summary(
                    unit.max_events_per_period,
                    unit.max_periods_per_epoch,
                    event_sensitivity(spec.streams[name]),
                    unit.field,
                )
                entry["unit_costs"] = [c.as_dict() for c in costs[name]]
            if name in levels:
                entry["level_weights"] = levels[name]
            if name in groups:
                entry["attribute_weights"] = groups[name]
            by_group = group_plans(spec.streams[name], noise)
            if by_group:
                entry["budget_groups"] = [
                    {"group": group, **planned.as_dict()} for group, planned in by_group
                ]
            factors = publication_factors(spec.streams[name])
            if factors is not None:
                entry["projected_at_publication"] = {
                    "constraint": spec.streams[name].constraints.kind,
                    "std_factor_min": factors[0],
                    "std_factor_max": factors[1],
                }
        return json.dumps(plans, indent=2)
    shown = []
    for row in rows:
        shown.append(row)
        if target_std is None:  # each budget group's releases, on rows of their own
            parts = group_plans(spec.streams[row.stream], noise)
            shown += [StreamPlan(f"  {row.stream} [{g}]", planned) for g, planned in parts]
    out = [render_streams(shown, target_std)]
    if len(shown) > len(rows):
        out += [
            "[group]: the releases of one budget group (level_weights, attribute_weights), on its",
            "share of the budget (epsilon) and of the contribution bound (sens.); the stream's",
            "own row is the plan without weights",
        ]
    notes = [line for name, s in spec.streams.items() for line in _publication_note(name, s)]
    out += ["", *notes] if notes else []
    for name, table in costs.items():
        stream = spec.streams[name]
        unit = stream.privacy_unit
        assert unit is not None
        described = describe_unit(
            unit.max_events_per_period,
            unit.max_periods_per_epoch,
            event_sensitivity(stream),
            field=unit.field,
            l2=stream.rho is not None,
            event_l2_squared=event_l2_squared(stream) if stream.rho is not None else None,
        )
        out += ["", f"stream {name}: {described}", render_unit_costs(table, unit.field)]
    out += [line for name, p in levels.items() for line in ("", render_level_plan(name, p))]
    out += [line for name, p in groups.items() for line in ("", render_attribute_plan(name, p))]
    return "\n".join(out)
