"""The public records the feed reads: release and consistent records parsed field by field (pure).

Only the fields of the public record schemas (``schemas/release.schema.json``,
``schemas/consistent.schema.json``) are copied, by name: a record of another kind (a dead letter
published to a release topic by mistake), a missing or mistyped field, or a field the schema
does not define never gets past :func:`parse_release` / :func:`parse_consistent`; nor does a
stream name no spec could declare (the static site names a folder after it). Values are kept
exactly as released; nothing is clipped or rounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from streamdp.error_band import half_width95, half_widths95
from streamdp.feed.record_fields import (
    count_field,
    count_map,
    int_field,
    name_field,
    number_field,
    number_map,
    text_field,
    union,
    unreadable,
)
from streamdp.feed.release_fields import (
    MalformedFieldError,
    Place,
    budget_group_fields,
    place_fields,
    unit_fields,
    zcdp_fields,
)


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
    # the stream's period unit: "day", "month" or "fixed" (None: a record before the field)
    period_unit: str | None = None
    # a zCDP stream's L2 bound, the one its Gaussian noise is calibrated on (None: pure DP;
    # ``sensitivity`` is the L1 bound)
    l2_sensitivity: float | None = None
    # a stream with budget groups (level or attribute weights): the counter's group and the
    # share of the stream's epsilon (or rho) its noise spends (None: no groups)
    budget_group: str | None = None
    budget_share: float | None = None

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
            # streams with budget groups: the counter's group and its share of epsilon (or rho)
            "budget_group": self.budget_group,
            "budget_share": self.budget_share,
            "mechanism": self.mechanism,
            "sensitivity": self.sensitivity,
            # zCDP streams only: the L2 bound the Gaussian noise is calibrated on
            "l2_sensitivity": self.l2_sensitivity,
            "noise": self.noise,
            "noise_secure": self.noise_secure,
            # zCDP streams only (empty for pure DP): epsilon above is their (epsilon, delta) bound
            "rho": self.rho,
            "privacy_delta": self.delta,
            # what epsilon (or rho) and sensitivity hold per: "event" or "<field> per epoch"
            "protects": self.protects,
            # a stream protecting a unit: the bounds its sensitivity is multiplied by (else empty)
            "unit_max_events_per_period": None if self.unit_bounds is None else self.unit_bounds[0],
            "unit_max_periods_per_epoch": None if self.unit_bounds is None else self.unit_bounds[1],
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
            count_std=union(self.count_std, part.count_std),
            total_std=union(self.total_std, part.total_std),
            nonnegative_counts=union(self.nonnegative_counts, part.nonnegative_counts),
            nonnegative_totals=union(self.nonnegative_totals, part.nonnegative_totals),
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


def _period_unit(record: dict[str, Any]) -> str | None:
    unit = record.get("period_unit")
    return unit if unit in ("day", "month", "fixed") else None


def parse_release(record: object) -> Release | None:
    """The release in ``record`` (a decoded JSON value), or None when it is not a well-formed
    release record (another kind, a missing or mistyped field): such records are not shown."""
    if unreadable(record, "release") is not None:
        return None
    assert isinstance(record, dict)
    stream, counter = name_field(record.get("stream")), text_field(record.get("counter"))
    epoch, period = int_field(record.get("epoch")), int_field(record.get("period"))
    start, end = text_field(record.get("period_start")), text_field(record.get("period_end"))
    count, total = count_field(record.get("noisy_count")), count_field(record.get("noisy_total"))
    count_std, total_std = (
        number_field(record.get("count_std")),
        number_field(record.get("total_std")),
    )
    epsilon = number_field(record.get("epsilon"))
    # ``sensitivity`` since schema_version 2; ``delta`` in version 1 (old topics still read)
    sensitivity = int_field(record.get("sensitivity" if record["schema_version"] > 1 else "delta"))
    horizon = int_field(record.get("horizon"))
    mechanism, objective = text_field(record.get("mechanism")), text_field(record.get("objective"))
    noise, secure = text_field(record.get("noise")), record.get("noise_secure")
    index = int_field(record.get("counter_index"))
    try:
        rho, privacy_delta, l2 = zcdp_fields(record)
        group, share = budget_group_fields(record)
        unit_field, unit_bounds = unit_fields(record)
        place, cell = place_fields(record)
    except MalformedFieldError:
        return None
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
        text_field(record.get("title")), text_field(record.get("description")),
        text_field(record.get("unit")),
        rho, privacy_delta, unit_field, unit_bounds, place, cell,
        source=text_field(record.get("source")),
        l2_sensitivity=l2,
        period_unit=_period_unit(record),
        budget_group=group, budget_share=share,
    )  # fmt: skip


def parse_consistent(record: object) -> Consistent | None:
    """The consistent revision record in ``record``, or None when it is not one."""
    if unreadable(record, "consistent") is not None:
        return None
    assert isinstance(record, dict)
    stream = name_field(record.get("stream"))
    revision, covered = int_field(record.get("revision")), int_field(record.get("periods_covered"))
    epoch, period = int_field(record.get("epoch")), int_field(record.get("period"))
    start, end = text_field(record.get("period_start")), text_field(record.get("period_end"))
    constraint = text_field(record.get("constraint"))
    counts, totals = number_map(record.get("counts")), number_map(record.get("totals"))
    # count_std/total_std: optional (records before they were added lack them), exact if present
    count_std, total_std = (
        number_map(record.get("count_std")),
        number_map(record.get("total_std")),
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
    integer_counts = count_map(record.get("nonnegative_counts"))
    integer_totals = count_map(record.get("nonnegative_totals"))
    if integer_counts is None or integer_totals is None:
        integer_counts = integer_totals = None
    return Consistent(
        stream, revision, covered, constraint, epoch, period, start, end, counts, totals,
        count_std, total_std, integer_counts, integer_totals,
    )  # fmt: skip
