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

Dead letters always fit: :class:`DeadLetterRecord` bounds its raw record, message and labels on
construction so that its key plus value is at most
:data:`streamdp.engine.dead_letter_bounds.MAX_DEAD_LETTER_BYTES` (see that module).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import orjson

from streamdp.consistency.nonnegative import METHOD as NONNEGATIVE_METHOD
from streamdp.engine import json_text
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

if TYPE_CHECKING:
    from streamdp.engine.counter_fields import CounterFields

#: 2: one vocabulary (issue 14): the contribution bound is ``sensitivity`` (was ``delta``) and
#: the dead-letter reason ``contribution_over_sensitivity`` (was ``contribution_over_delta``);
#: see docs/consuming.md, "Migrating from schema_version 1".
SCHEMA_VERSION = 2

#: What a record is; its ``"kind"`` field, and what sinks route by (:mod:`streamdp.engine.sinks`).
RecordKind = Literal["release", "consistent", "dead_letter"]


@dataclass(frozen=True, slots=True)
class ReleaseContext:
    """What every release of one stream's period close shares: the period, the stream's budget,
    mechanism and noise, its optional fields. Made once per close and held by each of its
    :class:`ReleaseRecord`; the JSON text of these fields is written once, here."""

    stream: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    epsilon: float
    sensitivity: int
    horizon: int
    mechanism: str
    objective: str
    noise: str
    noise_secure: bool
    # the stream's wording from its spec (``title``, ``description``, ``unit``; the declared
    # ones only, :class:`streamdp.engine.spec.StreamAbout`) and, for a zCDP stream, its
    # privacy fields (stream_releases.zcdp_fields): optional fields, present when they apply
    optional_fields: Mapping[str, object] = field(default_factory=dict)
    # the stream's per-counter optional fields (budget group, place, cell), shared by every
    # release of the stream and asked for a counter's when serialised (CounterFields)
    counter_fields: CounterFields | None = None
    #: the record's JSON text between its own values (see :meth:`ReleaseRecord.to_json`)
    _text: tuple[str, str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        clash = set(self.optional_fields) & set(_RELEASE_FIELDS)
        if clash:
            raise ValueError(f"optional release fields {sorted(clash)} shadow required ones")
        before_counter = ',"stream":' + json_text.string(self.stream) + ',"counter":'
        before_count = (
            f',"epoch":{self.epoch},"period":{self.period}'
            f',"period_start":{json_text.string(self.period_start)}'
            f',"period_end":{json_text.string(self.period_end)},"noisy_count":'
        )
        before_index = (
            f',"epsilon":{json_text.number(self.epsilon)}'
            f',"sensitivity":{json_text.number(self.sensitivity)}'
            f',"horizon":{json_text.number(self.horizon)}'
            f',"mechanism":{json_text.string(self.mechanism)}'
            f',"objective":{json_text.string(self.objective)}'
            f',"noise":{json_text.string(self.noise)}'
            f',"noise_secure":{"true" if self.noise_secure else "false"},"counter_index":'
        )
        optional = json_text.members(self.optional_fields)
        object.__setattr__(self, "_text", (before_counter, before_count, before_index, optional))


#: a release's fields before its optional ones, in the order its JSON has them
_RELEASE_FIELDS = (
    "schema_version",
    "kind",
    "key",
    "stream",
    "counter",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "noisy_count",
    "noisy_total",
    "count_std",
    "total_std",
    "epsilon",
    "sensitivity",
    "horizon",
    "mechanism",
    "objective",
    "noise",
    "noise_secure",
    "counter_index",
)


@dataclass(frozen=True, slots=True)
class ReleaseRecord:
    """One counter's noisy release at the close of one period (DESIGN §5 outputs): its own
    values, and the :class:`ReleaseContext` it shares with the other releases of the close
    (read through as attributes: ``record.stream``, ``record.epoch``, ...)."""

    kind: ClassVar[RecordKind] = "release"

    context: ReleaseContext
    counter: str
    # the counter's position among the stream's counters as declared (readers order by it)
    counter_index: int
    # int for integer mechanisms; float for kary_gls (and projected k-ary) releases
    noisy_count: int | float
    noisy_total: int | float
    count_std: float
    total_std: float

    @property
    def stream(self) -> str:
        return self.context.stream

    @property
    def epoch(self) -> int:
        return self.context.epoch

    @property
    def period(self) -> int:
        return self.context.period

    @property
    def period_start(self) -> str:
        return self.context.period_start

    @property
    def period_end(self) -> str:
        return self.context.period_end

    @property
    def epsilon(self) -> float:
        return self.context.epsilon

    @property
    def sensitivity(self) -> int:
        return self.context.sensitivity

    @property
    def horizon(self) -> int:
        return self.context.horizon

    @property
    def mechanism(self) -> str:
        return self.context.mechanism

    @property
    def objective(self) -> str:
        return self.context.objective

    @property
    def noise(self) -> str:
        return self.context.noise

    @property
    def noise_secure(self) -> bool:
        return self.context.noise_secure

    @property
    def optional_fields(self) -> Mapping[str, object]:
        return self.context.optional_fields

    @property
    def key(self) -> str:
        context = self.context
        return f"{context.stream}|{self.counter}|{context.epoch}|{context.period}"

    def to_dict(self) -> dict[str, Any]:
        context = self.context
        fields = context.counter_fields
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "key": self.key,
            "stream": context.stream,
            "counter": self.counter,
            "epoch": context.epoch,
            "period": context.period,
            "period_start": context.period_start,
            "period_end": context.period_end,
            "noisy_count": self.noisy_count,
            "noisy_total": self.noisy_total,
            "count_std": self.count_std,
            "total_std": self.total_std,
            "epsilon": context.epsilon,
            "sensitivity": context.sensitivity,
            "horizon": context.horizon,
            "mechanism": context.mechanism,
            "objective": context.objective,
            "noise": context.noise,
            "noise_secure": context.noise_secure,
            "counter_index": self.counter_index,
            **context.optional_fields,
            **({} if fields is None else fields.of(self.counter_index)),
        }

    def to_json(self) -> str:
        """The compact JSON of :meth:`to_dict` (``json.dumps`` with ``(",", ":")``, byte for
        byte), assembled from the context's pieces and this record's values."""
        context = self.context
        before_counter, before_count, before_index, optional = context._text
        fields = context.counter_fields
        number = json_text.number
        return "".join(
            (
                _RELEASE_HEAD,
                json_text.string(self.key),
                before_counter,
                json_text.string(self.counter),
                before_count,
                number(self.noisy_count),
                ',"noisy_total":',
                number(self.noisy_total),
                ',"count_std":',
                number(self.count_std),
                ',"total_std":',
                number(self.total_std),
                before_index,
                number(self.counter_index),
                optional,
                "" if fields is None else fields.json_of(self.counter_index),
                "}",
            )
        )


_RELEASE_HEAD = f'{{"schema_version":{SCHEMA_VERSION},"kind":"release","key":'


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
