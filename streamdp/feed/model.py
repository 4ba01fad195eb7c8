"""The feed's published view: release and consistent records in, page data and CSV out (pure).

Only the fields of the public record schemas (``schemas/release.schema.json``,
``schemas/consistent.schema.json``) are copied, by name: a record of another kind (a dead letter
published to a release topic by mistake) or a field the schema does not define never reaches the
page, the JSON or the CSV. Values are shown exactly as released; nothing is clipped or rounded.

The view keeps, per stream, counter, epoch and period, the latest release (a re-publication after
a restart carries the same values), and per stream, epoch and period the consistent record of the
highest revision seen (a compacted topic keeps the same).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamdp.demo.board import half_width95

#: Columns of ``releases.csv``, in order.
RELEASE_COLUMNS = (
    "stream",
    "counter",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "noisy_count",
    "count_std",
    "count_half_width95",
    "noisy_total",
    "total_std",
    "total_half_width95",
    "epsilon",
    "mechanism",
)
#: Columns of ``consistent.csv``, in order (one row per stream, period and counter).
CONSISTENT_COLUMNS = (
    "stream",
    "revision",
    "periods_covered",
    "constraint",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "counter",
    "consistent_count",
    "consistent_count_std",
    "consistent_count_half_width95",
    "consistent_total",
    "consistent_total_std",
    "consistent_total_half_width95",
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

    def row(self) -> dict[str, Any]:
        """The period's values with their 95% half-widths (docs/consuming.md section 4)."""
        return {
            "stream": self.stream,
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
            "count_half_width95": _half_widths(self.count_std),
            "total_half_width95": _half_widths(self.total_std),
        }


def _half_widths(stds: Mapping[str, float] | None) -> dict[str, float] | None:
    return None if stds is None else {name: half_width95(sd) for name, sd in stds.items()}


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
    if not isinstance(value, dict) or not value:
        return None
    out: dict[str, float] = {}
    for key, item in value.items():
        number = _number(item)
        if not isinstance(key, str) or number is None:
            return None
        out[key] = number
    return out


def parse_release(record: object) -> Release | None:
    """The release in ``record`` (a decoded JSON value), or None when it is not a well-formed
    release record (another kind, a missing or mistyped field): such records are not shown."""
    if not isinstance(record, dict) or record.get("kind") != "release":
        return None
    stream, counter = _text(record.get("stream")), _text(record.get("counter"))
    epoch, period = _int(record.get("epoch")), _int(record.get("period"))
    start, end = _text(record.get("period_start")), _text(record.get("period_end"))
    count, total = _count(record.get("noisy_count")), _count(record.get("noisy_total"))
    count_std, total_std = _number(record.get("count_std")), _number(record.get("total_std"))
    epsilon = _number(record.get("epsilon"))
    # ``sensitivity`` since schema_version 2; ``delta`` in version 1 (old topics still read)
    sensitivity = _int(record.get("sensitivity", record.get("delta")))
    horizon = _int(record.get("horizon"))
    mechanism, objective = _text(record.get("mechanism")), _text(record.get("objective"))
    noise, secure = _text(record.get("noise")), record.get("noise_secure")
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
    )  # fmt: skip


def parse_consistent(record: object) -> Consistent | None:
    """The consistent revision record in ``record``, or None when it is not one."""
    if not isinstance(record, dict) or record.get("kind") != "consistent":
        return None
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
    return Consistent(
        stream, revision, covered, constraint, epoch, period, start, end, counts, totals,
        count_std, total_std,
    )  # fmt: skip


@dataclass
class FeedView:
    """Everything the page shows, built from the public records read so far."""

    releases: dict[tuple[str, str, int, int], Release] = field(default_factory=dict)
    consistent: dict[tuple[str, int, int], Consistent] = field(default_factory=dict)
    #: records read that were not well-formed release/consistent records (not shown)
    ignored: int = 0
    #: bumped on every change, so a poller can tell whether anything is new
    version: int = 0

    def add(self, record: object, expected_kind: str) -> None:
        """Take one decoded record read from the ``expected_kind`` source ("release" or
        "consistent"); anything else is counted in :attr:`ignored` and dropped."""
        if expected_kind == "release":
            release = parse_release(record)
            if release is None:
                self.ignored += 1
                return
            key = (release.stream, release.counter, release.epoch, release.period)
            if self.releases.get(key) != release:
                self.releases[key] = release
                self.version += 1
            return
        revision = parse_consistent(record)
        if revision is None:
            self.ignored += 1
            return
        ckey = (revision.stream, revision.epoch, revision.period)
        held = self.consistent.get(ckey)
        if held is None or revision.revision > held.revision:
            self.consistent[ckey] = revision
            self.version += 1

    def streams(self) -> list[str]:
        names = {key[0] for key in self.releases} | {key[0] for key in self.consistent}
        return sorted(names)

    def release_rows(self) -> list[dict[str, Any]]:
        """Every release shown, ordered by stream, counter, epoch, period."""
        return [self.releases[key].row() for key in sorted(self.releases)]

    def consistent_rows(self) -> list[dict[str, Any]]:
        """The latest consistent value of every stream, period and counter."""
        rows: list[dict[str, Any]] = []
        for key in sorted(self.consistent):
            held = self.consistent[key]
            rows.extend(
                {
                    "stream": held.stream,
                    "revision": held.revision,
                    "periods_covered": held.periods_covered,
                    "constraint": held.constraint,
                    "epoch": held.epoch,
                    "period": held.period,
                    "period_start": held.period_start,
                    "period_end": held.period_end,
                    "counter": counter,
                    "consistent_count": held.counts[counter],
                    "consistent_count_std": _get(held.count_std, counter),
                    "consistent_count_half_width95": _get(_half_widths(held.count_std), counter),
                    "consistent_total": held.totals.get(counter),
                    "consistent_total_std": _get(held.total_std, counter),
                    "consistent_total_half_width95": _get(_half_widths(held.total_std), counter),
                }
                for counter in sorted(held.counts)
            )
        return rows

    def document(self, source: str) -> dict[str, Any]:
        """The JSON the page draws (``feed.json``): per stream its mechanism, epsilon per epoch
        and summed over epochs, the series of every counter and the latest consistent values."""
        out: list[dict[str, Any]] = []
        for name in self.streams():
            keys = sorted(k for k in self.releases if k[0] == name)
            releases = [self.releases[k] for k in keys]
            epsilon_per_epoch: dict[int, float] = {}
            for release in releases:
                epsilon_per_epoch[release.epoch] = release.epsilon
            latest = max(releases, key=lambda r: (r.epoch, r.period), default=None)
            counters: dict[str, list[dict[str, Any]]] = {}
            for release in releases:
                counters.setdefault(release.counter, []).append(release.row())
            revisions = [v for k, v in sorted(self.consistent.items()) if k[0] == name]
            newest = max(revisions, key=lambda c: (c.epoch, c.period), default=None)
            out.append(
                {
                    "stream": name,
                    "mechanism": None if latest is None else latest.mechanism,
                    "objective": None if latest is None else latest.objective,
                    "horizon": None if latest is None else latest.horizon,
                    "sensitivity": None if latest is None else latest.sensitivity,
                    "noise": None if latest is None else latest.noise,
                    "noise_secure": all(r.noise_secure for r in releases),
                    "epsilon_per_epoch": [
                        {"epoch": e, "epsilon": epsilon_per_epoch[e]}
                        for e in sorted(epsilon_per_epoch)
                    ],
                    "epsilon_sum_over_epochs": math.fsum(epsilon_per_epoch.values()),
                    "latest_period": None
                    if latest is None
                    else {
                        "epoch": latest.epoch,
                        "period": latest.period,
                        "period_start": latest.period_start,
                        "period_end": latest.period_end,
                    },
                    "counters": [
                        {"counter": counter, "periods": counters[counter]}
                        for counter in sorted(counters)
                    ],
                    "consistent_latest": None if newest is None else newest.entry(),
                    "consistent": [c.entry() for c in revisions],
                }
            )
        return {"source": source, "version": self.version, "streams": out}


def _get(values: Mapping[str, float] | None, name: str) -> float | None:
    return None if values is None else values.get(name)


def to_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """``rows`` as CSV text with a header; floats written with ``repr`` (exact round trip)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _cell(row[c]) for c in columns])
    return buffer.getvalue()


def _cell(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)
