"""Reading one ``[streams.<name>]`` table of a configuration into a :class:`StreamSpec`.

A stream is one continual release: its source, epsilon, contribution bound (the sensitivity
Delta), horizon N, period, counters, public constraints, mechanism and objective, lateness,
consistency schedule and what happens at the end of an epoch. The counters and constraints
tables are read by the stream's kind (:data:`streamdp.kinds.KINDS`); the privacy definition and
the noise-scale limits by :mod:`streamdp.engine.stream_privacy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streamdp.engine.config_reader import ConfigReader
from streamdp.engine.privacy_unit_table import read_privacy_unit
from streamdp.engine.spec import (
    DECODED_MECHANISMS,
    PRESENTATION_KEYS,
    ConsistencySpec,
    ConstraintSpec,
    CounterSpec,
    EpochEnd,
    Mechanism,
    Objective,
    OverSensitivity,
    PeriodSpec,
    PeriodUnit,
    SourceSpec,
    StreamAbout,
    StreamSpec,
)
from streamdp.engine.stream_privacy import (
    check_gaussian_limits,
    check_noise_limits,
    read_privacy,
    zcdp_epsilon_bound,
)
from streamdp.errors import ConfigError
from streamdp.shown_value import shown

MAX_HORIZON = 10_000_000
#: Most counters such a stream may have (the projection matrix is width x width floats).
DENSE_PROJECTION_LIMIT = 4096

_STREAM_KEYS = (
    "source", "epsilon", "sensitivity", "horizon", "period", "counters", "constraints", "mechanism",
    "objective", "allowed_lateness", "consistency", "on_epoch_end", "over_sensitivity",
    "max_future_periods", "branching", "privacy", "privacy_unit", *PRESENTATION_KEYS,
)  # fmt: skip
#: Mechanisms a zCDP stream runs in the worker (the others are planned with ``plan --rho``).
ZCDP_WORKER_MECHANISMS = ("binary", "kary_gls", "blt")
#: The longest ``title``, ``description`` and ``unit`` (characters): words for a page heading,
#: a paragraph and a column label, carried by every release record.
ABOUT_LIMITS = {"title": 120, "description": 1000, "unit": 40}
_PERIOD_KEYS = ("unit", "start", "timezone", "length")
_CONSISTENCY_KEYS = ("every_periods", "at_epoch_end", "nonnegative_integers")


def read_stream(
    ctx: ConfigReader, name: str, table: dict[str, Any], sources: Mapping[str, SourceSpec]
) -> StreamSpec:
    """The stream ``name`` of ``table`` (its ``source`` one of ``sources``), validated."""
    ctx.only(table, _STREAM_KEYS, "")
    for required in ("source", "sensitivity", "horizon", "period", "counters"):
        if required not in table:
            raise ctx.fail(required, "missing (required for every stream)")
    if "privacy" not in table and "epsilon" not in table:
        raise ctx.fail(
            "epsilon",
            'missing: give epsilon (pure DP), or privacy = { definition = "zcdp", rho = ... }',
        )
    source_name = table["source"]
    if source_name not in sources:
        raise ctx.fail(
            "source", f"unknown source {source_name!r}; configured: {', '.join(sources)}"
        )
    source = sources[source_name]
    rho, delta = read_privacy(ctx, table, source)
    epsilon = (
        ctx.epsilon(table["epsilon"], "epsilon") if rho is None else zcdp_epsilon_bound(rho, delta)
    )
    sensitivity = ctx.integer(table["sensitivity"], "sensitivity", 1)
    horizon = ctx.integer(table["horizon"], "horizon", 1, MAX_HORIZON)
    period = _period(ctx, ctx.table(table["period"], "period"))
    counters = _counters(ctx, ctx.table(table["counters"], "counters"), source)
    constraints = _constraints(
        ctx, ctx.table(table.get("constraints", {}), "constraints"), counters
    )
    mechanism = cast(
        Mechanism,
        ctx.choice(
            table.get("mechanism", "fda"),
            "mechanism",
            ("fda", "binary", "naive", "kary_digits", "kary_gls", "blt"),
        ),
    )
    objective = cast(
        Objective,
        ctx.choice(table.get("objective", "total"), "objective", ("total", "minimax", "count")),
    )
    from streamdp.continual.strategy import objectives_for

    if mechanism == "blt" and rho is None:
        raise ctx.fail(
            "mechanism",
            "blt (a matrix factorization with discrete Gaussian noise) runs under zCDP only: "
            'give privacy = { definition = "zcdp", rho = ... } on a source with rho_cap',
        )
    allowed = ("total", "minimax") if mechanism == "blt" else objectives_for(mechanism)
    if objective not in allowed:
        raise ctx.fail(
            "objective",
            f"{objective!r} does not apply to mechanism {mechanism!r}; it takes "
            f"{' or '.join(repr(o) for o in allowed)}",
        )
    if (
        mechanism in DECODED_MECHANISMS
        and constraints.kind != "none"
        and counters.width > DENSE_PROJECTION_LIMIT
    ):
        raise ctx.fail(
            "mechanism",
            f"{mechanism} projects its releases onto the constraints with a dense "
            f"{counters.width} x {counters.width} matrix; with constraints it takes at most "
            f"{DENSE_PROJECTION_LIMIT} counters. Use fda, binary or naive (their revisions "
            "project node by node) or constraints = { kind = 'none' }",
        )
    kary = mechanism in ("kary_digits", "kary_gls")
    branching = None
    if "branching" in table:
        if not kary:
            raise ctx.fail("branching", "applies to kary_digits and kary_gls only")
        branching = ctx.integer(table["branching"], "branching", 2, 64)
    lateness = ctx.duration(table.get("allowed_lateness", 0), "allowed_lateness", positive=False)
    consistency_raw = ctx.table(table.get("consistency", {}), "consistency")
    ctx.only(consistency_raw, _CONSISTENCY_KEYS, "consistency")
    consistency = ConsistencySpec(
        every_periods=ctx.integer(
            consistency_raw.get("every_periods", 0), "consistency.every_periods", 0
        ),
        at_epoch_end=ctx.boolean(
            consistency_raw.get("at_epoch_end", True), "consistency.at_epoch_end"
        ),
        nonnegative_integers=_nonnegative_integers(ctx, consistency_raw, counters, constraints),
    )
    on_epoch_end = cast(
        EpochEnd, ctx.choice(table.get("on_epoch_end", "roll"), "on_epoch_end", ("roll", "stop"))
    )
    over_sensitivity = cast(
        OverSensitivity,
        ctx.choice(table.get("over_sensitivity", "reject"), "over_sensitivity", ("reject", "clip")),
    )
    max_future = ctx.integer(table.get("max_future_periods", 0), "max_future_periods", 0)

    from streamdp.continual.lattice_blt import counters_touched
    from streamdp.kinds import stream_kind

    # Delta must admit a single legitimate event, otherwise every event would be rejected
    stream_kind(counters.kind).check_contribution_bound(
        ctx, counters, constraints, sensitivity, over_sensitivity
    )
    unit = read_privacy_unit(ctx, table, horizon)
    multiplier = 1 if unit is None else unit.multiplier
    l2_squared = 0
    if rho is None:
        check_noise_limits(
            ctx, epsilon, sensitivity * multiplier, mechanism, objective, horizon, branching
        )
    else:
        if mechanism not in ZCDP_WORKER_MECHANISMS:
            default = "" if "mechanism" in table else " (the default when none is given)"
            raise ctx.fail(
                "mechanism",
                f"{mechanism!r}{default} does not run under zCDP in this version; zCDP streams run "
                f"{', '.join(ZCDP_WORKER_MECHANISMS)} (compare the zCDP counters with "
                "streamdp plan --rho)",
            )
        if mechanism == "kary_gls" and objective == "count":
            raise ctx.fail(
                "objective",
                "'count' is not tuned under zCDP; kary_gls takes 'total' or 'minimax' there",
            )
        # a unit's records add up (triangle inequality): L2 bound M times the event's
        event_l2_squared = stream_kind(counters.kind).l2_squared_bound(
            counters, constraints, sensitivity
        )
        l2_squared = event_l2_squared * multiplier * multiplier
        # the lattice BLT's sigma also covers its rounding on every counter one event (or
        # unit) changes: the worker's count of them (the bank's width only matters there)
        touched = (
            counters_touched(sensitivity * multiplier, counters.width)
            if mechanism == "blt"
            else sensitivity * multiplier
        )
        check_gaussian_limits(
            ctx, rho, l2_squared, mechanism, objective, horizon, branching, touched
        )
    spec = StreamSpec(
        name=name,
        source=source.name,
        epsilon=epsilon,
        sensitivity=sensitivity,
        horizon=horizon,
        period=period,
        counters=counters,
        constraints=constraints,
        mechanism=mechanism,
        objective=objective,
        branching=branching,
        allowed_lateness_seconds=lateness,
        consistency=consistency,
        on_epoch_end=on_epoch_end,
        over_sensitivity=over_sensitivity,
        max_future_periods=max_future,
        about=_about(ctx, table),
        rho=rho,
        delta=delta,
        l2_squared=l2_squared,
        privacy_unit=unit,
    )
    from streamdp.engine.budget_groups import check_budget_groups

    try:
        check_budget_groups(spec)
    except ConfigError as error:
        written = "attribute_weights" if spec.counters.attribute_weights else "level_weights"
        raise ctx.fail(f"counters.{written}", str(error)) from None
    return spec


def _nonnegative_integers(
    ctx: ConfigReader,
    consistency: Mapping[str, Any],
    counters: CounterSpec,
    constraints: ConstraintSpec,
) -> bool:
    """``consistency.nonnegative_integers``: only a places stream whose revisions make its tree
    add up has the integer tree those estimates are rounded down."""
    field_name = "consistency.nonnegative_integers"
    wanted = ctx.boolean(consistency.get("nonnegative_integers", False), field_name)
    if wanted and counters.kind != "places":
        raise ctx.fail(
            field_name,
            f"applies to places streams only (integers rounded down the places tree); this "
            f"stream counts {counters.kind!r}",
        )
    if wanted and constraints.kind != "tree":
        raise ctx.fail(
            field_name,
            'needs constraints = { kind = "tree" }: the integers are rounded down the tree '
            "from consistent values that add up",
        )
    return wanted


def _about(ctx: ConfigReader, table: Mapping[str, Any]) -> StreamAbout:
    """The stream's optional wording: one line of printable text each, within
    :data:`ABOUT_LIMITS` (the description may hold line breaks)."""
    words: dict[str, str | None] = {}
    for key, limit in ABOUT_LIMITS.items():
        value = table.get(key)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ctx.fail(key, f"must be non-empty text, got {shown(value)}")
            value = value.strip()
            allowed_breaks = "\n" if key == "description" else ""
            if any(not (c.isprintable() or c in allowed_breaks) for c in value):
                raise ctx.fail(
                    key,
                    "holds a control character; use plain text"
                    + (" (line breaks are allowed here)" if key == "description" else ""),
                )
            if len(value) > limit:
                raise ctx.fail(key, f"is {len(value)} characters; at most {limit} are allowed")
        words[key] = value
    return StreamAbout(**words)


def _period(ctx: ConfigReader, table: dict[str, Any]) -> PeriodSpec:
    import datetime as dt

    ctx.only(table, _PERIOD_KEYS, "period")
    unit = cast(PeriodUnit, ctx.choice(table.get("unit"), "period.unit", ("day", "month", "fixed")))
    start = table.get("start")
    if unit == "fixed":
        length = int(ctx.duration(table.get("length"), "period.length", positive=True))
        if length < 1:
            raise ctx.fail("period.length", "must be at least one second")
        if "timezone" in table:
            raise ctx.fail("period.timezone", "only calendar periods (day, month) take a timezone")
        text = start.isoformat() if isinstance(start, dt.datetime) else start
        try:
            parsed = dt.datetime.fromisoformat(text) if isinstance(text, str) else None
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise ctx.fail(
                "period.start",
                "fixed periods start at an instant with a UTC offset, e.g. "
                f"2024-01-01T00:00:00Z; got {start!r}",
            )
        return PeriodSpec(unit=unit, start=parsed.isoformat(), length_seconds=length)
    if "length" in table:
        raise ctx.fail("period.length", "only fixed periods take a length")
    timezone = table.get("timezone", "UTC")
    try:
        ZoneInfo(timezone) if isinstance(timezone, str) else None
    except (ZoneInfoNotFoundError, ValueError):
        timezone = None
    if not isinstance(timezone, str):
        raise ctx.fail(
            "period.timezone",
            f"must be an IANA time zone name such as 'Europe/Berlin' or 'UTC', got "
            f"{table.get('timezone')!r}",
        )
    date = start if isinstance(start, dt.date) and not isinstance(start, dt.datetime) else None
    if date is None and isinstance(start, str):
        try:
            date = dt.date.fromisoformat(start)
        except ValueError:
            date = None
    if date is None:
        raise ctx.fail(
            "period.start", f"calendar periods start on a date such as 2024-01-01; got {start!r}"
        )
    if unit == "month" and date.day != 1:
        raise ctx.fail("period.start", f"monthly periods start on the 1st of a month; got {date}")
    return PeriodSpec(unit=unit, start=date.isoformat(), timezone=timezone)


def _counters(ctx: ConfigReader, table: dict[str, Any], source: SourceSpec) -> CounterSpec:
    from streamdp.kinds import KINDS

    kind = ctx.choice(table.get("kind"), "counters.kind", tuple(KINDS))
    plugin = KINDS[kind]
    if source.kind != plugin.source_kind:
        raise ctx.fail(
            "counters.kind",
            f"{kind!r} counters need a source of {plugin.source_kind} events, but source "
            f"{source.name!r} carries {source.kind} events",
        )
    return plugin.parse_counters(ctx, table)


def _constraints(ctx: ConfigReader, table: dict[str, Any], counters: CounterSpec) -> ConstraintSpec:
    from streamdp.kinds import KINDS

    supported = tuple(k for plugin in KINDS.values() for k in plugin.constraint_kinds)
    kind = ctx.choice(table.get("kind", "none"), "constraints.kind", ("none", *supported))
    if kind == "none":
        ctx.only(table, ("kind",), "constraints")
        return ConstraintSpec()
    plugin = KINDS[counters.kind]
    if kind not in plugin.constraint_kinds:
        owner = next(p.name for p in KINDS.values() if kind in p.constraint_kinds)
        raise ctx.fail("constraints.kind", f"{kind!r} needs {owner} counters")
    return plugin.parse_constraints(ctx, table, counters)
