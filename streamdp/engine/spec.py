"""Stream specifications: the TOML configuration a release engine runs, validated at load time.

A configuration names input *sources* (Kafka topics / files of one event kind, each with a
per-source epsilon cap) and *streams* (one continual release each: period, horizon N, epsilon,
contribution bound (the sensitivity Delta), counters, public constraints, mechanism, lateness,
consistency schedule, what happens at the end of an epoch). See DESIGN.md §2 and §5 and
``streamdp/examples/*.toml``.

Budget arithmetic is exact: epsilons are read from their decimal text (``tomllib`` with
``parse_float=Decimal``), so ``0.1 + 0.2 <= 0.3`` holds when checking a source's cap.

Every error is a :class:`~streamdp.errors.ConfigError` that names the stream (or source), the
field, what was wrong and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Context, Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streamdp.errors import ConfigError

SourceKind = Literal["order", "person"]
PeriodUnit = Literal["day", "month", "fixed"]
CounterKind = Literal["items", "attributes", "flag"]
ConstraintKind = Literal["none", "combos", "hierarchy"]
EpochEnd = Literal["roll", "stop"]
OverSensitivity = Literal["reject", "clip"]
Mechanism = Literal["fda", "binary", "naive", "kary_digits", "kary_gls"]
Objective = Literal["total", "minimax", "count"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
NAME_RULE = "1-64 characters from letters, digits and _ . + - (starting with a letter or digit)"
MAX_HORIZON = 10_000_000

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


@dataclass(frozen=True)
class PeriodSpec:
    """How event time maps to periods.

    ``unit`` "day"/"month": calendar periods in ``timezone`` starting at local midnight of the
    date ``start`` (for months, ``start`` must be the first of a month). ``unit`` "fixed":
    periods of ``length_seconds`` starting at the instant ``start`` (RFC 3339 with offset).
    """

    unit: PeriodUnit
    start: str
    timezone: str = "UTC"
    length_seconds: int = 0


@dataclass(frozen=True)
class Attribute:
    """One categorical attribute of a person record and its allowed categories (in order)."""

    name: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class CounterSpec:
    """What a stream counts.

    - ``items``: one counter per item; an order adds its quantity of each item.
    - ``attributes``: census-style; counters are the total, every one-way marginal and every
      cell of the attributes' cross product (layout: see :attr:`names`). One record adds 1 to
      the total, to one category of each attribute and to one cell: k + 2 counters.
    - ``flag``: one counter named ``flag_counter``, +1 for every record whose boolean
      attribute ``flag_field`` is true.
    """

    kind: CounterKind
    items: tuple[str, ...] = ()
    attributes: tuple[Attribute, ...] = ()
    flag_field: str = ""
    flag_counter: str = ""

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Counter names in vector order, as the kind lays them out (:mod:`streamdp.kinds`;
        computed once: a census stream has hundreds).

        attributes: ``total``, then ``attr=cat`` for every attribute in order, then the cells
        ``a1=c1,a2=c2,...`` in row-major order over the attributes' categories.
        """
        from streamdp.kinds import stream_kind

        return stream_kind(self.kind).counter_names(self)

    @property
    def width(self) -> int:
        """Number of counters."""
        return len(self.names)


@dataclass(frozen=True)
class ConstraintSpec:
    """Public linear constraints the consistent revisions respect.

    ``combos``: every period's item vector lies in the span of the combo vectors (seed 004);
    ``combos`` holds (name, quantities in item order). ``orders_must_be_combos``: an order whose
    item vector is not exactly one combo is rejected (reason ``not_a_combo``).
    ``hierarchy``: total = sum of each attribute's marginal = sum of cells (seed 000).
    """

    kind: ConstraintKind = "none"
    combos: tuple[tuple[str, tuple[int, ...]], ...] = ()
    orders_must_be_combos: bool = False


@dataclass(frozen=True)
class ConsistencySpec:
    """When consistent revisions are published: after every ``every_periods`` closed periods
    (0 = never on a count) and/or when an epoch ends (``at_epoch_end``)."""

    every_periods: int = 0
    at_epoch_end: bool = True


@dataclass(frozen=True)
class StreamSpec:
    """One continual release (DESIGN §2, §5). ``epsilon`` is exact (Decimal)."""

    name: str
    source: str
    epsilon: Decimal
    sensitivity: int
    horizon: int
    period: PeriodSpec
    counters: CounterSpec
    constraints: ConstraintSpec = field(default_factory=ConstraintSpec)
    mechanism: Mechanism = "fda"
    objective: Objective = "total"
    branching: int | None = None  # k of the k-ary strategies (None: optimised for the horizon)
    allowed_lateness_seconds: float = 0.0
    consistency: ConsistencySpec = field(default_factory=ConsistencySpec)
    on_epoch_end: EpochEnd = "roll"
    over_sensitivity: OverSensitivity = "reject"
    max_future_periods: int = 0


@dataclass(frozen=True)
class SourceSpec:
    """An input source: its topic (or file label), the event kind it carries, its epsilon cap."""

    name: str
    topic: str
    kind: SourceKind
    epsilon_cap: Decimal


@dataclass(frozen=True)
class EngineSpec:
    """A whole configuration: sources and streams by name (insertion order kept)."""

    sources: Mapping[str, SourceSpec]
    streams: Mapping[str, StreamSpec]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def fingerprint(self) -> str:
        """SHA-256 of the canonical configuration (snapshots refuse a different spec)."""
        return _sha256_of(self.raw)

    def fingerprints(self) -> tuple[str, str]:
        """:meth:`fingerprint` and the fingerprint of the same configuration written with the
        first format's key names (:data:`RENAMED_KEYS`): a state stored before the keys were
        renamed restores once the operator renames them, and under no other configuration."""
        streams = self.raw.get("streams")
        if not isinstance(streams, Mapping):
            return self.fingerprint(), self.fingerprint()
        legacy_name = {new: old for old, new in RENAMED_KEYS.items()}
        legacy = dict(self.raw)
        legacy["streams"] = {
            name: {legacy_name.get(k, k): v for k, v in table.items()}
            if isinstance(table, Mapping)
            else table
            for name, table in streams.items()
        }
        return self.fingerprint(), _sha256_of(legacy)

    def source_of_topic(self, topic: str) -> SourceSpec | None:
        """The source reading ``topic`` or named ``topic``, if any."""
        for source in self.sources.values():
            if topic in (source.topic, source.name):
                return source
        return None


def _sha256_of(raw: Mapping[str, Any]) -> str:
    text = json.dumps(_jsonable(raw), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


# ----------------------------------------------------------------------------- loading


def load_spec(path: str | Path) -> EngineSpec:
    """Read and validate a TOML stream specification file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read configuration {str(p)!r}: {error.strerror}") from None
    return parse_spec(text, origin=str(p))


def parse_spec(text: str, *, origin: str = "<string>") -> EngineSpec:
    """Validate TOML text; decimals are parsed exactly (``Decimal``)."""
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{origin}: not valid TOML: {error}") from None
    return spec_from_dict(data, origin=origin)


class ConfigReader:
    """Reads one table of the configuration and says where a problem is in its messages:
    ``<origin>: stream 'x': field 'y': ...`` (used by the stream kinds' parsers too)."""

    def __init__(self, origin: str, where: str) -> None:
        self.origin = origin
        self.where = where

    def fail(self, field_name: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {self.where}: field {field_name!r}: {problem}")

    def table(self, data: Any, field_name: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(field_name, f"must be a table, got {_kind(data)}")
        return cast(dict[str, Any], data)

    def only(self, data: Mapping[str, Any], allowed: tuple[str, ...], field_name: str) -> None:
        unknown = [k for k in data if k not in allowed]
        if unknown:
            renamed = RENAMED_KEYS.get(unknown[0])
            if renamed is not None and renamed in allowed:
                raise self.fail(
                    f"{field_name}.{unknown[0]}" if field_name else unknown[0],
                    f"was renamed to {renamed!r} (configuration format 2, see "
                    "docs/consuming.md 'Migrating from schema_version 1'); rename the key",
                )
            raise self.fail(
                f"{field_name}.{unknown[0]}" if field_name else unknown[0],
                f"unknown key; allowed keys here: {', '.join(allowed)}",
            )

    def name(self, value: Any, field_name: str) -> str:
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            raise self.fail(field_name, f"must be a name of {NAME_RULE}, got {value!r}")
        return value

    def choice(self, value: Any, field_name: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.fail(field_name, f"must be one of {', '.join(allowed)}; got {value!r}")
        return cast(str, value)

    def integer(self, value: Any, field_name: str, lo: int, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field_name, f"must be an integer, got {value!r}")
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise self.fail(field_name, f"must be {bound}, got {value}")
        return value

    def boolean(self, value: Any, field_name: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field_name, f"must be true or false, got {value!r}")
        return value

    def epsilon(self, value: Any, field_name: str) -> Decimal:
        if isinstance(value, bool):
            value = None
        try:
            number = Decimal(str(value)) if isinstance(value, int | str | Decimal) else None
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or number <= 0:
            raise self.fail(
                field_name, f"must be a positive decimal number such as 0.5, got {value!r}"
            )
        return number

    def duration(self, value: Any, field_name: str, *, positive: bool) -> float:
        seconds: float | None = None
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            seconds = float(value)
        elif isinstance(value, str):
            match = _DURATION.match(value)
            if match:
                seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        if seconds is None or seconds < 0 or (positive and seconds <= 0):
            raise self.fail(
                field_name,
                "must be a duration: seconds as a number, or text like '90s', '15m', '2h', "
                f"'1d'{' (greater than zero)' if positive else ''}; got {value!r}",
            )
        return seconds


def _kind(value: Any) -> str:
    return type(value).__name__


#: Keys of the first configuration format and their names since (one vocabulary: Delta is the
#: *sensitivity*, never ``delta``, which DP readers take for the delta of (epsilon, delta)-DP).
RENAMED_KEYS = {
    "delta": "sensitivity",
    "strategy": "mechanism",
    "over_delta": "over_sensitivity",
}
_SOURCE_KEYS = ("topic", "kind", "epsilon_cap")
_STREAM_KEYS = (
    "source", "epsilon", "sensitivity", "horizon", "period", "counters", "constraints", "mechanism",
    "objective", "allowed_lateness", "consistency", "on_epoch_end", "over_sensitivity",
    "max_future_periods", "branching",
)  # fmt: skip
_PERIOD_KEYS = ("unit", "start", "timezone", "length")
_CONSISTENCY_KEYS = ("every_periods", "at_epoch_end")


def spec_from_dict(data: Mapping[str, Any], *, origin: str = "<config>") -> EngineSpec:
    """Validate a parsed configuration (decimals as ``Decimal``) into an :class:`EngineSpec`."""
    top = ConfigReader(origin, "configuration")
    top.only(data, ("sources", "streams"), "")
    sources_raw = top.table(data.get("sources", {}), "sources")
    streams_raw = top.table(data.get("streams", {}), "streams")
    if not sources_raw:
        raise top.fail("sources", "at least one [sources.<name>] table is required")
    if not streams_raw:
        raise top.fail("streams", "at least one [streams.<name>] table is required")

    sources: dict[str, SourceSpec] = {}
    topics: dict[str, str] = {}
    for name, raw in sources_raw.items():
        ctx = ConfigReader(origin, f"source {name!r}")
        ctx.name(name, "name")
        table = ctx.table(raw, "")
        ctx.only(table, _SOURCE_KEYS, "")
        topic = ctx.name(table.get("topic", name), "topic")
        if topic in topics:
            raise ctx.fail("topic", f"topic {topic!r} is already read by source {topics[topic]!r}")
        topics[topic] = name
        if "kind" not in table:
            raise ctx.fail("kind", "missing; say which event kind it carries: order or person")
        kind = cast(SourceKind, ctx.choice(table["kind"], "kind", ("order", "person")))
        if "epsilon_cap" not in table:
            raise ctx.fail("epsilon_cap", "missing; every source needs a total epsilon cap")
        cap = ctx.epsilon(table["epsilon_cap"], "epsilon_cap")
        sources[name] = SourceSpec(name=name, topic=topic, kind=kind, epsilon_cap=cap)

    streams: dict[str, StreamSpec] = {}
    for name, raw in streams_raw.items():
        ctx = ConfigReader(origin, f"stream {name!r}")
        ctx.name(name, "name")
        streams[name] = _stream(ctx, name, ctx.table(raw, ""), sources)

    for source in sources.values():
        members = [s for s in streams.values() if s.source == source.name]
        total = sum((s.epsilon for s in members), Decimal(0))
        if total > source.epsilon_cap:
            listing = " + ".join(f"{s.name} ({s.epsilon})" for s in members)
            raise ConfigError(
                f"{origin}: source {source.name!r}: the streams reading it spend epsilon "
                f"{listing} = {total}, over its epsilon_cap {source.epsilon_cap}; lower their "
                "epsilons or raise the cap (streams over one source compose: their epsilons add)"
            )
    return EngineSpec(sources=sources, streams=streams, raw=dict(data))


def _stream(
    ctx: ConfigReader, name: str, table: dict[str, Any], sources: Mapping[str, SourceSpec]
) -> StreamSpec:
    ctx.only(table, _STREAM_KEYS, "")
    for required in ("source", "epsilon", "sensitivity", "horizon", "period", "counters"):
        if required not in table:
            raise ctx.fail(required, "missing (required for every stream)")
    source_name = table["source"]
    if source_name not in sources:
        raise ctx.fail(
            "source", f"unknown source {source_name!r}; configured: {', '.join(sources)}"
        )
    source = sources[source_name]
    epsilon = ctx.epsilon(table["epsilon"], "epsilon")
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
            ("fda", "binary", "naive", "kary_digits", "kary_gls"),
        ),
    )
    objective = cast(
        Objective,
        ctx.choice(table.get("objective", "total"), "objective", ("total", "minimax", "count")),
    )
    from streamdp.continual.strategy import objectives_for

    allowed = objectives_for(mechanism)
    if objective not in allowed:
        raise ctx.fail(
            "objective",
            f"{objective!r} does not apply to mechanism {mechanism!r}; it takes "
            f"{' or '.join(repr(o) for o in allowed)}",
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
    )
    on_epoch_end = cast(
        EpochEnd, ctx.choice(table.get("on_epoch_end", "roll"), "on_epoch_end", ("roll", "stop"))
    )
    over_sensitivity = cast(
        OverSensitivity,
        ctx.choice(table.get("over_sensitivity", "reject"), "over_sensitivity", ("reject", "clip")),
    )
    max_future = ctx.integer(table.get("max_future_periods", 0), "max_future_periods", 0)

    from streamdp.kinds import stream_kind

    # Delta must admit a single legitimate event, otherwise every event would be rejected
    stream_kind(counters.kind).check_contribution_bound(
        ctx, counters, constraints, sensitivity, over_sensitivity
    )
    _check_noise_limits(ctx, epsilon, sensitivity, mechanism, objective, horizon, branching)
    return StreamSpec(
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
    )


#: Significant digits of a stream's epsilon that the noise maths reads exactly (float's DBL_DIG).
EPSILON_DIGITS = 15


def _round_down(value: Decimal, digits: int) -> Decimal:
    return Context(prec=digits, rounding=ROUND_DOWN).plus(value)


def _check_noise_limits(  # noqa: PLR0917 - the stream's noise parameters
    ctx: ConfigReader,
    epsilon: Decimal,
    sensitivity: int,
    mechanism: Mechanism,
    objective: Objective,
    horizon: int,
    branching: int | None = None,
) -> None:
    """Refuse an epsilon or Delta whose exact noise scales leave the sampler's safe range
    (2^-40 .. 2^40 counts; see streamdp.continual.variance.MAX_NOISE_SCALE)."""
    from streamdp.continual.strategy import check_noise_scales

    digits = len(epsilon.normalize().as_tuple().digits)
    if digits > EPSILON_DIGITS:
        raise ctx.fail(
            "epsilon",
            f"has {digits} significant digits; at most {EPSILON_DIGITS} are read exactly by the "
            f"noise maths: round it down (e.g. to {_round_down(epsilon, EPSILON_DIGITS)})",
        )
    try:
        check_noise_scales(mechanism, objective, horizon, epsilon, sensitivity, branching)
    except ConfigError as error:
        raise ctx.fail("epsilon", str(error)) from None


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
