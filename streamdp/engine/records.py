"""Output records: releases, consistent revisions and dead letters (see ``schemas/``).

Every record is a frozen dataclass with ``.key`` (a stable string the daemon uses as the Kafka
key), ``.to_dict()`` (JSON-able data matching its schema) and ``.to_json()`` (compact JSON text).
Key formats (names cannot contain ``|``; see :data:`streamdp.engine.spec.NAME_RULE`):

- release: ``"{stream}|{counter}|{epoch}|{period}"``; re-publishing after a restart yields the
  same key and the same values, so a consumer de-duplicating by key sees each release once.
- consistent: ``"{stream}|{epoch}|{period}"``; every revision re-publishes all periods with a
  higher ``revision``, so a compacted topic keeps the latest consistent value of each period.
- dead letter: ``"{source or -}|{topic or -}|{offset or -}|{event_id or -}"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streamdp.engine.events import Reason

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ReleaseRecord:
    """One counter's noisy release at the close of one period (DESIGN §5 outputs)."""

    stream: str
    counter: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    noisy_count: int
    noisy_total: int
    count_std: float
    total_std: float
    epsilon: float
    delta: int
    horizon: int
    mechanism: str
    objective: str
    noise: str
    noise_secure: bool

    @property
    def key(self) -> str:
        return f"{self.stream}|{self.counter}|{self.epoch}|{self.period}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "release",
            "key": self.key,
            "stream": self.stream,
            "counter": self.counter,
            "epoch": self.epoch,
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "noisy_count": self.noisy_count,
            "noisy_total": self.noisy_total,
            "count_std": self.count_std,
            "total_std": self.total_std,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "horizon": self.horizon,
            "mechanism": self.mechanism,
            "objective": self.objective,
            "noise": self.noise,
            "noise_secure": self.noise_secure,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


@dataclass(frozen=True)
class ConsistentRecord:
    """One period's consistent counts and running totals in revision ``revision``.

    ``counts``/``totals`` map counter name to the consistent (weighted least-squares) estimate,
    computed from stored noisy nodes only (post-processing, no budget). ``periods_covered`` is
    the number of periods (over all epochs) the revision was computed from.
    """

    stream: str
    revision: int
    periods_covered: int
    epoch: int
    period: int
    period_start: str
    period_end: str
    counts: dict[str, float]
    totals: dict[str, float]
    constraint: str

    @property
    def key(self) -> str:
        return f"{self.stream}|{self.epoch}|{self.period}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "consistent",
            "key": self.key,
            "stream": self.stream,
            "revision": self.revision,
            "periods_covered": self.periods_covered,
            "epoch": self.epoch,
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "constraint": self.constraint,
            "counts": self.counts,
            "totals": self.totals,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


@dataclass(frozen=True)
class DeadLetterRecord:
    """A rejected input record. Holds the raw record: protect it like the input topic."""

    reason: Reason
    message: str
    raw: str
    raw_encoding: str = "utf-8"
    stream: str | None = None
    source: str | None = None
    topic: str | None = None
    offset: int | None = None
    event_id: str | None = None

    @property
    def key(self) -> str:
        parts = (self.source, self.topic, self.offset, self.event_id)
        return "|".join("-" if p is None else str(p) for p in parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "dead_letter",
            "key": self.key,
            "reason": self.reason,
            "message": self.message,
            "stream": self.stream,
            "source": self.source,
            "topic": self.topic,
            "offset": self.offset,
            "event_id": self.event_id,
            "raw": self.raw,
            "raw_encoding": self.raw_encoding,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


OutputRecord = ReleaseRecord | ConsistentRecord
