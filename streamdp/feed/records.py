"""The public records the feed reads: release and consistent records parsed field by field (pure).

Only the fields of the public record schemas (``schemas/release.schema.json``,
``schemas/consistent.schema.json``) are copied, by name: a record of another kind (a dead letter
published to a release topic by mistake), a missing or mistyped field, or a field the schema
does not define never gets past :func:`parse_release` / :func:`parse_consistent`. Values are kept
exactly as released; nothing is clipped or rounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from streamdp.error_band import half_width95, half_widths95

V = TypeVar("V")

#: The ``schema_version``s the feed reads (docs/consuming.md, section 6): 2, the current one
#: (``schemas/*.schema.json``), and 1, whose release field ``delta`` is read as ``sensitivity``
#: ("Migrating from schema_version 1"). Records of any other version are not shown.
KNOWN_SCHEMA_VERSIONS = (1, 2)
#: Record kinds streamdp writes: any other ``kind`` is reported as unknown, not quoted.
_KINDS = ("release", "consistent", "dead_letter")


class NotJson:
    """What a line that is not JSON decodes to (:data:`NOT_JSON`): never shown, counted."""


NOT_JSON = NotJson()


def unreadable(record: object, kind: str) -> str | None:
    """Why ``record``, read from the source of ``kind`` records, is not even parsed (not JSON,
    not an object, another kind, a schema version the feed does not know), or None. The reason
    goes to the operator's console: it names no value of the record beyond a known kind or a
    small version number."""
    if isinstance(record, NotJson):
        return "not JSON"
    if not isinstance(record, dict):
        return "not a JSON object"
    found = record.get("kind")
    if found != kind:
        return f"kind {found}" if isinstance(found, str) and found in _KINDS else "unknown kind"
    version = _int(record.get("schema_version"))  # an integer, never true or 2.0
    if version in KNOWN_SCHEMA_VERSIONS:
        return None
    if "schema_version" not in record:
        return "no schema_version"
    small = version is not None and 0 <= version < 1000
    return f"schema_version {version}" if small else "unknown schema_version"


@dataclass(frozen=True)
class Place:
    """Where a places stream's counter sits in its public tree (release field ``place``)."""

    node: str
    parent: str | None  # None at the root
    label: str
    level: int


@dataclass(frozen=True)
class Release:
    """One counter's release in one period: the public fields the page shows."""

    stream: str
    counter: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    noisy_count: int | float  # a real number for kary_gls (rounding would change its variance)
    noisy_total: int | float
    count_std: float
    total_std: float
    epsilon: float
    sensitivity: int
    horizon: int
    mechanism: str
    objective: str
    noise: str
    noise_secure: bool
    # the counter's declared position (None: a record written before releases carried it)
    counter_index: int | None = None
    # the stream's wording from its spec, when declared (ReleaseRecord.about)
    title: str | None = None
    description: str | None = None
    unit: str | None = None
    # a zCDP stream's rho per epoch and the delta its epsilon is stated at (None: pure DP)
    rho: float | None = None
    delta: float | None = None
    # a stream protecting a person (issue 28): the field naming the unit and its bounds
    # (records per period, periods per epoch); None: the stream protects one event
    unit_field: str | None = None
    unit_bounds: tuple[int, int] | None = None
    # a places stream (issue 29): the counter's place in the public tree and, with
    # attributes, its cell (None for other kinds)
    place: Place | None = None
    cell: str | None = None
    # the input source the stream reads (None: a record written before releases named it)
    source: str | None = None

    @property
    def protects(self) -> str:
        """Per what the guarantee holds: ``"event"`` or ``"<field> per epoch"``."""
        return "event" if self.unit_field is None else f"{self.unit_field} per epoch"

    def row(self) -> dict[str, Any]:
        """The period's values with their 95% half-widths (docs/consuming.md section 4)."""
        return {
            "stream": self.stream,
            "source": self.source,
            "counter": self.counter,
            "epoch": self.epoch,
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "noisy_count": self.noisy_count,
            "count_std": self.count_std,
            "count_half_width95": half_width95(self.count_std),
            "noisy_total": self.noisy_total,
            "total_std": self.total_std,
            "total_half_width95": half_width95(self.total_std),
            "epsilon": self.epsilon,
            "mechanism": self.mechanism,
            "sensitivity": self.sensitivity,
            "noise": self.noise,
            "noise_secure": self.noise_secure,
            # zCDP streams only (empty for pure DP): epsilon above is their (epsilon, delta) bound
            "rho": self.rho,
            "privacy_delta": self.delta,
            # what epsilon (or rho) and sensitivity hold per: "event" or "<field> per epoch"
            "protects": self.protects,
        }


@dataclass(frozen=True)
class Consistent:
    """One period's consistent counts and totals in one revision."""

    stream: str
    revision: int
    periods_covered: int
    constraint: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    counts: Mapping[str, float]
    totals: Mapping[str, float]
    #: per counter, the exact standard deviations (records written before they existed: None)
    count_std: Mapping[str, float] | None = None
    total_std: Mapping[str, float] | None = None
    #: a places stream's non-negative integer estimates (post-processed from counts/totals,
    #: biased; None when the stream does not publish them)
    nonnegative_counts: Mapping[str, int] | None = None
    nonnegative_totals: Mapping[str, int] | None = None

    def merged(self, part: Consistent) -> Consistent:
        """This record with another part of the same period and revision added (a wide
        stream publishes a period's counters in several records)."""

        return replace(
            self,
            counts={**self.counts, **part.counts},
            totals={**self.totals, **part.totals},
            count_std=_union(self.count_std, part.count_std),
            total_std=_union(self.total_std, part.total_std),
            nonnegative_counts=_union(self.nonnegative_counts, part.nonnegative_counts),
            nonnegative_totals=_union(self.nonnegative_totals, part.nonnegative_totals),
        )

    def entry(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "periods_covered": self.periods_covered,
            "constraint": self.constraint,
            "epoch": self.epoch,
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "counts": dict(self.counts),
            "totals": dict(self.totals),
            "count_std": None if self.count_std is None else dict(self.count_std),
            "total_std": None if self.total_std is None else dict(self.total_std),
            "count_half_width95": half_widths95(self.count_std),
            "total_half_width95": half_widths95(self.total_std),
            "nonnegative_counts": None
            if self.nonnegative_counts is None
            else dict(self.nonnegative_counts),
            "nonnegative_totals": None
            if self.nonnegative_totals is None
            else dict(self.nonnegative_totals),
        }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: object) -> int | float | None:
    """A released count or total: an int stays an int, a finite real number (kary_gls) a float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return _number(value)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _number_map(value: object) -> dict[str, float] | None:
    return _map(value, _number)


def _count_map(value: object) -> dict[str, int] | None:
    """A map of non-negative integers (a non-negative estimate), else None."""
    return _map(value, lambda item: None if (n := _int(item)) is None or n < 0 else n)


def _map(value: object, parse: Callable[[object], V | None]) -> dict[str, V] | None:
    """A non-empty JSON object whose every value ``parse`` accepts, else None."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[str, V] = {}
    for key, item in value.items():
        parsed = parse(item)
        if not isinstance(key, str) or parsed is None:
            return None
        out[key] = parsed
    return out


def _union(mine: Mapping[str, V] | None, theirs: Mapping[str, V] | None) -> Mapping[str, V] | None:
    """Two parts' maps of one record merged (None when either part lacks it)."""
    return None if mine is None or theirs is None else {**mine, **theirs}


def _zcdp(record: dict[str, Any]) -> tuple[float | None, float | None]:
    """``(rho, delta)`` of a zCDP release (both positive numbers), else ``(None, None)``."""
    if record.get("privacy_definition") != "zcdp":
        return None, None
    rho, delta = _number(record.get("rho")), _number(record.get("privacy_delta"))
    if rho is None or delta is None or rho <= 0 or not 0 < delta < 1:
        return None, None
    return rho, delta


def _unit(record: dict[str, Any]) -> tuple[str | None, tuple[int, int] | None]:
    """``(field, (max_events_per_period, max_periods_per_epoch))`` of a release protecting a
    privacy unit, else ``(None, None)``."""
    unit = record.get("privacy_unit")
    if not isinstance(unit, dict):
        return None, None
    name = _text(unit.get("field"))
    per_period = _int(unit.get("max_events_per_period"))
    periods = _int(unit.get("max_periods_per_epoch"))
    if name is None or per_period is None or periods is None:
        return None, None
    return name, (per_period, periods)


def _place(record: dict[str, Any]) -> tuple[Place | None, str | None]:
    """``(place, cell)`` of a places stream's release (cell: None without attributes), else
    ``(None, None)``; a malformed ``place`` counts as absent."""
    where = record.get("place")
    if not isinstance(where, dict):
        return None, None
    node, label, level = (
        _text(where.get("node")),
        _text(where.get("label")),
        _int(where.get("level")),
    )
    parent = where.get("parent")
    if node is None or label is None or level is None or level < 0:
        return None, None
    if not (parent is None or _text(parent) is not None):
        return None, None
    return Place(node, parent if isinstance(parent, str) else None, label, level), _text(
        record.get("cell")
    )


def parse_release(record: object) -> Release | None:
    """The release in ``record`` (a decoded JSON value), or None when it is not a well-formed
    release record (another kind, a missing or mistyped field): such records are not shown."""
    if unreadable(record, "release") is not None:
        return None
    assert isinstance(record, dict)
    stream, counter = _text(record.get("stream")), _text(record.get("counter"))
    epoch, period = _int(record.get("epoch")), _int(record.get("period"))
    start, end = _text(record.get("period_start")), _text(record.get("period_end"))
    count, total = _count(record.get("noisy_count")), _count(record.get("noisy_total"))
    count_std, total_std = _number(record.get("count_std")), _number(record.get("total_std"))
    epsilon = _number(record.get("epsilon"))
    # ``sensitivity`` since schema_version 2; ``delta`` in version 1 (old topics still read)
    sensitivity = _int(record.get("sensitivity" if record["schema_version"] > 1 else "delta"))
    horizon = _int(record.get("horizon"))
    mechanism, objective = _text(record.get("mechanism")), _text(record.get("objective"))
    noise, secure = _text(record.get("noise")), record.get("noise_secure")
    index = _int(record.get("counter_index"))
    if (
        stream is None
        or counter is None
        or epoch is None
        or period is None
        or start is None
        or end is None
        or count is None
        or total is None
        or count_std is None
        or total_std is None
        or epsilon is None
        or sensitivity is None
        or horizon is None
        or mechanism is None
        or objective is None
        or noise is None
        or not isinstance(secure, bool)
    ):
        return None
    return Release(
        stream, counter, epoch, period, start, end, count, total, count_std, total_std,
        epsilon, sensitivity, horizon, mechanism, objective, noise, secure,
        None if index is None or index < 0 else index,
        _text(record.get("title")), _text(record.get("description")), _text(record.get("unit")),
        *_zcdp(record), *_unit(record), *_place(record),
        source=_text(record.get("source")),
    )  # fmt: skip


def parse_consistent(record: object) -> Consistent | None:
    """The consistent revision record in ``record``, or None when it is not one."""
    if unreadable(record, "consistent") is not None:
        return None
    assert isinstance(record, dict)
    stream = _text(record.get("stream"))
    revision, covered = _int(record.get("revision")), _int(record.get("periods_covered"))
    epoch, period = _int(record.get("epoch")), _int(record.get("period"))
    start, end = _text(record.get("period_start")), _text(record.get("period_end"))
    constraint = _text(record.get("constraint"))
    counts, totals = _number_map(record.get("counts")), _number_map(record.get("totals"))
    # count_std/total_std: optional (records before they were added lack them), exact if present
    count_std, total_std = (
        _number_map(record.get("count_std")),
        _number_map(record.get("total_std")),
    )
    if ("count_std" in record and count_std is None) or (
        "total_std" in record and total_std is None
    ):
        return None
    if (
        stream is None
        or revision is None
        or covered is None
        or epoch is None
        or period is None
        or start is None
        or end is None
        or constraint is None
        or counts is None
        or totals is None
    ):
        return None
    # optional non-negative integer estimates: both well-formed, or neither shown
    integer_counts = _count_map(record.get("nonnegative_counts"))
    integer_totals = _count_map(record.get("nonnegative_totals"))
    if integer_counts is None or integer_totals is None:
        integer_counts = integer_totals = None
    return Consistent(
        stream, revision, covered, constraint, epoch, period, start, end, counts, totals,
        count_std, total_std, integer_counts, integer_totals,
    )  # fmt: skip
