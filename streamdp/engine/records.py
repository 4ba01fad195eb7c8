"""Output records: releases, consistent revisions and dead letters (see ``schemas/``).

Every record is a frozen dataclass with ``.key`` (a stable string the daemon uses as the Kafka
key), ``.to_dict()`` (JSON-able data matching its schema) and ``.to_json()`` (compact JSON text).
Key formats (names cannot contain ``|``; see :data:`streamdp.engine.config_reader.NAME_RULE`):

- release: ``"{stream}|{counter}|{epoch}|{period}"``; re-publishing after a restart yields the
  same key and the same values, so a consumer de-duplicating by key sees each release once.
- consistent: ``"{stream}|{epoch}|{period}"``; a revision publishes only the periods no earlier
  revision published (a period's consistent values never change), so a compacted topic keeps
  one consistent value per period. A stream too wide for one record (a places stream of
  thousands of counters) publishes each period in parts, keyed ``"{stream}|{epoch}|{period}|
  {part}"`` (:func:`streamdp.engine.stream_revisions.counter_parts`).

Releases are :mod:`streamdp.engine.release_record` (they share their close's fields).
Dead letters always fit: :class:`DeadLetterRecord` bounds its raw record, message and labels on
construction so that its key plus value is at most
:data:`streamdp.engine.dead_letter_bounds.MAX_DEAD_LETTER_BYTES` (see that module).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from streamdp.consistency.nonnegative import METHOD as NONNEGATIVE_METHOD
from streamdp.engine.counter_values import plain
from streamdp.engine.dead_letter_bounds import (
    MAX_DEAD_LETTER_MESSAGE,
    MAX_OFFSET,
    fit_raw,
    fit_text,
    raw_bytes,
    safe_label,
)
from streamdp.engine.events import Reason, is_unicode_text
from streamdp.engine.record_schema import SCHEMA_VERSION, RecordKind
from streamdp.engine.release_record import ReleaseRecord


@dataclass(frozen=True)
class ConsistentRecord:
    """One period's consistent counts and running totals in revision ``revision``.

    ``counts``/``totals`` map counter name to the consistent (weighted least-squares) estimate,
    computed from stored noisy nodes only (post-processing, no budget). ``count_std`` /
    ``total_std`` map counter name to the estimate's exact standard deviation (the projection's
    variance: ``P_jj`` times the release's). ``periods_covered`` is the number of periods (over
    all epochs) the revision was computed from. ``nonnegative_counts``/``nonnegative_totals``
    (a places stream with ``consistency.nonnegative_integers``; None otherwise) map counter name
    to a non-negative integer estimate post-processed from ``counts``/``totals`` (biased,
    tree-consistent; :mod:`streamdp.consistency.nonnegative`), labelled by
    ``nonnegative_method`` in the JSON.
    """

    kind: ClassVar[RecordKind] = "consistent"

    stream: str
    revision: int
    periods_covered: int
    epoch: int
    period: int
    period_start: str
    period_end: str
    # counter name -> value: dicts, or views over arrays (CounterValues) for wide streams
    counts: Mapping[str, float]
    totals: Mapping[str, float]
    constraint: str
    count_std: Mapping[str, float] = field(default_factory=dict)
    total_std: Mapping[str, float] = field(default_factory=dict)
    # a wide stream's period is published in ``parts`` records of contiguous counters (each
    # under Kafka's request limit); ``part`` is 1-based. One part: the fields are left out
    part: int = 1
    parts: int = 1
    nonnegative_counts: Mapping[str, int] | None = None
    nonnegative_totals: Mapping[str, int] | None = None

    @property
    def key(self) -> str:
        base = f"{self.stream}|{self.epoch}|{self.period}"
        return base if self.parts == 1 else f"{base}|{self.part}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "key": self.key,
            "stream": self.stream,
            "revision": self.revision,
            "periods_covered": self.periods_covered,
            "epoch": self.epoch,
            "period": self.period,
            "period_start": self.period_start,
            "period_end": self.period_end,
            "constraint": self.constraint,
            "counts": plain(self.counts),
            "totals": plain(self.totals),
            "count_std": plain(self.count_std),
            "total_std": plain(self.total_std),
            **({"part": self.part, "parts": self.parts} if self.parts > 1 else {}),
            **self._nonnegative_fields(),
        }

    def _nonnegative_fields(self) -> dict[str, Any]:
        if self.nonnegative_counts is None or self.nonnegative_totals is None:
            return {}
        return {
            "nonnegative_method": NONNEGATIVE_METHOD,
            "nonnegative_counts": plain(self.nonnegative_counts),
            "nonnegative_totals": plain(self.nonnegative_totals),
        }

    def to_json(self) -> str:
        """Compact JSON of :meth:`to_dict`, written by orjson: a wide stream's revision
        serialises millions of map entries, which ``json.dumps`` wrote about 40 times slower
        (README, "Statistics by place"). The same values as ``json.dumps``'s text (each float
        its shortest round-trip form; orjson writes 1e-05 as 0.00001), UTF-8 rather than
        ASCII-escaped, and never longer per map entry than ``counter_parts`` allows for
        (tests/test_consistent_json.py)."""
        return orjson.dumps(self.to_dict()).decode()


@dataclass(frozen=True)
class DeadLetterRecord:
    """A rejected input record. Holds the raw record: protect it like the input topic.

    Construct it with the whole raw record (``raw``: its UTF-8 text, or base64 of its bytes):
    construction measures and digests it (``raw_length`` in bytes, ``raw_sha256``), then keeps
    at most :data:`~streamdp.engine.dead_letter_bounds.MAX_DEAD_LETTER_RAW` of it
    (``raw_truncated``), bounds the message and makes every label encodable (see
    :mod:`streamdp.engine.dead_letter_bounds`), so the record always fits
    :data:`~streamdp.engine.dead_letter_bounds.MAX_DEAD_LETTER_BYTES`. Passing ``raw_sha256``
    says ``raw`` is already a kept copy (a record read back): then only the bounds are applied.
    """

    kind: ClassVar[RecordKind] = "dead_letter"

    reason: Reason
    message: str
    raw: str
    raw_encoding: str = "utf-8"
    stream: str | None = None
    source: str | None = None
    topic: str | None = None
    offset: int | None = None
    event_id: str | None = None
    raw_length: int | None = None
    raw_sha256: str | None = None
    raw_truncated: bool = False

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: fields are settled here, once
        if self.raw_sha256 is None:
            original = raw_bytes(self.raw, self.raw_encoding)
            put(self, "raw_length", len(original))
            put(self, "raw_sha256", hashlib.sha256(original).hexdigest())
        raw, cut = fit_raw(self.raw, self.raw_encoding)
        if cut:
            put(self, "raw", raw)
            put(self, "raw_truncated", True)
        message = self.message
        if not is_unicode_text(message):
            message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        put(self, "message", fit_text(message, MAX_DEAD_LETTER_MESSAGE)[0])
        for name in ("stream", "source", "topic", "event_id"):
            value = getattr(self, name)
            label = safe_label(value)
            if label is not value:
                put(self, name, label)
        offset = self.offset
        if offset is not None and (type(offset) is not int or not 0 <= offset <= MAX_OFFSET):
            put(self, "offset", None)

    @property
    def key(self) -> str:
        parts = (self.source, self.topic, self.offset, self.event_id)
        return "|".join("-" if p is None else str(p) for p in parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
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
            "raw_length": self.raw_length,
            "raw_sha256": self.raw_sha256,
            "raw_truncated": self.raw_truncated,
        }

    def to_json(self) -> str:
        """Compact ASCII JSON (non-ASCII and lone surrogates escaped): always valid UTF-8."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @property
    def encoded_size(self) -> int:
        """Bytes this record takes as a Kafka record's key plus value (UTF-8): at most
        :data:`~streamdp.engine.dead_letter_bounds.MAX_DEAD_LETTER_BYTES` for every dead letter
        (a property test checks)."""
        return len(self.key.encode("utf-8")) + len(self.to_json().encode("utf-8"))


OutputRecord = ReleaseRecord | ConsistentRecord
#: Every record streamdp writes (public releases and revisions, protected dead letters).
AnyRecord = ReleaseRecord | ConsistentRecord | DeadLetterRecord

__all__ = [
    "SCHEMA_VERSION",
    "AnyRecord",
    "ConsistentRecord",
    "DeadLetterRecord",
    "RecordKind",
    "ReleaseRecord",
]
