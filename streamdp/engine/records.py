"""Output records: releases, consistent revisions and dead letters (see ``schemas/``).

Every record is a frozen dataclass with ``.key`` (a stable string the daemon uses as the Kafka
key), ``.to_dict()`` (JSON-able data matching its schema) and ``.to_json()`` (compact JSON text).
Key formats (names cannot contain ``|``; see :data:`streamdp.engine.config_reader.NAME_RULE`):

- release: ``"{stream}|{counter}|{epoch}|{period}"``; re-publishing after a restart yields the
  same key and the same values, so a consumer de-duplicating by key sees each release once.
- consistent: ``"{stream}|{epoch}|{period}"``; a revision publishes only the periods no earlier
  revision published (a period's consistent values never change), so a compacted topic keeps
  one consistent value per period.
- dead letter: ``"{source or -}|{topic or -}|{offset or -}|{event_id or -}"``.

Dead letters always fit (DESIGN §5; issue 16): whatever the rejected record held, a dead letter's
encoded key plus value is at most :data:`MAX_DEAD_LETTER_BYTES`, far below a producer's request
limit (Kafka's default 1,000,000 bytes). The raw record is cut to :data:`MAX_DEAD_LETTER_RAW`
bytes of escaped JSON text, with its full length and SHA-256 beside it; the message is cut to
:data:`MAX_DEAD_LETTER_MESSAGE`; a name or event id that is not Unicode text of at most
:data:`MAX_LABEL_CHARS` characters is replaced by ``"sha256:<hex of its UTF-8 bytes>"`` so
every key encodes to UTF-8. :class:`DeadLetterRecord` does all of this on construction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from streamdp.engine.events import Reason, is_unicode_text

#: 2: one vocabulary (issue 14): the contribution bound is ``sensitivity`` (was ``delta``) and
#: the dead-letter reason ``contribution_over_sensitivity`` (was ``contribution_over_delta``);
#: see docs/consuming.md, "Migrating from schema_version 1".
SCHEMA_VERSION = 2

#: Most bytes of the raw record a dead letter carries, measured as escaped JSON string content
#: (``\uXXXX`` escapes make non-ASCII text up to 12 bytes a character).
MAX_DEAD_LETTER_RAW: Final = 16_384
#: Most bytes of a dead letter's message, measured like the raw record.
MAX_DEAD_LETTER_MESSAGE: Final = 1_024
#: Longest stream, source, topic or event id a dead letter shows as it is (Kafka's limit on
#: topic names; event ids are at most 200 characters); longer ones are shown by digest.
MAX_LABEL_CHARS: Final = 249
#: Largest signed 64-bit integer: offsets beyond it are not Kafka offsets and are not shown.
_MAX_OFFSET: Final = 2**63 - 1
# field names, punctuation, schema_version, kind, reason, raw_encoding, raw_truncated
_SKELETON_BYTES: Final = 512
_NUMBER_BYTES: Final = 20  # an int64 in decimal
#: Bound on ``len(key.encode()) + len(to_json().encode())`` of any dead letter: the skeleton,
#: raw and message budgets, the digest, two numbers, four labels as JSON fields (12 bytes a
#: character escaped) and the key twice: escaped inside the value and as UTF-8 bytes (4 a
#: character; three labels, an offset and three separators).
MAX_DEAD_LETTER_BYTES: Final = (
    _SKELETON_BYTES
    + MAX_DEAD_LETTER_RAW
    + MAX_DEAD_LETTER_MESSAGE
    + 64
    + 2 * _NUMBER_BYTES
    + 4 * 12 * MAX_LABEL_CHARS
    + (3 * 12 * MAX_LABEL_CHARS + _NUMBER_BYTES + 3)
    + (3 * 4 * MAX_LABEL_CHARS + _NUMBER_BYTES + 3)
)


def _escaped_size(text: str) -> int:
    """Bytes of ``text`` inside a JSON string as ``json.dumps`` writes it (ASCII-escaped)."""
    return len(json.dumps(text)) - 2


def _longest_prefix(text: str, budget: int) -> int:
    """Length of the longest prefix of ``text`` whose escaped size is at most ``budget``.

    Every character costs 1 to 12 escaped bytes, so the answer is at most ``budget``
    characters; binary search over prefix lengths (O(budget log budget))."""
    low, high = 0, min(len(text), budget)
    while low < high:
        middle = (low + high + 1) // 2
        if _escaped_size(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def fit_text(text: str, budget: int, *, marker: str = "...") -> tuple[str, bool]:
    """``text`` cut so that its escaped JSON size is at most ``budget`` bytes (``marker``
    appended when cut, within the budget); True when it was cut."""
    if 12 * len(text) <= budget or _escaped_size(text) <= budget:
        return text, False
    return text[: _longest_prefix(text, budget - len(marker))] + marker, True


def _raw_bytes(raw: str, encoding: str) -> bytes:
    """The original bytes a dead letter's ``raw`` text stands for."""
    if encoding == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            pass
    return raw.encode("utf-8", "surrogatepass")


def _fit_raw(raw: str, encoding: str) -> tuple[str, bool]:
    """``raw`` within :data:`MAX_DEAD_LETTER_RAW`; base64 is cut at a multiple of 4
    characters so that what is kept still decodes (to a prefix of the record)."""
    if encoding == "base64" and raw.isascii():
        if len(raw) <= MAX_DEAD_LETTER_RAW:
            return raw, False
        return raw[: MAX_DEAD_LETTER_RAW - MAX_DEAD_LETTER_RAW % 4], True
    return fit_text(raw, MAX_DEAD_LETTER_RAW, marker="")


def safe_label(value: str | None) -> str | None:
    """``value`` when it is Unicode text of at most :data:`MAX_LABEL_CHARS` characters, else
    ``"sha256:"`` and the hex digest of its UTF-8 bytes (lone surrogates encoded as such)."""
    if value is None or (len(value) <= MAX_LABEL_CHARS and is_unicode_text(value)):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest}"


#: What a record is; its ``"kind"`` field, and what sinks route by (:mod:`streamdp.engine.sinks`).
RecordKind = Literal["release", "consistent", "dead_letter"]


@dataclass(frozen=True)
class ReleaseRecord:
    """One counter's noisy release at the close of one period (DESIGN §5 outputs)."""

    kind: ClassVar[RecordKind] = "release"

    stream: str
    counter: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    # int for integer mechanisms; float for kary_gls (and projected k-ary) releases
    noisy_count: int | float
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

    @property
    def key(self) -> str:
        return f"{self.stream}|{self.counter}|{self.epoch}|{self.period}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
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
            "sensitivity": self.sensitivity,
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
    computed from stored noisy nodes only (post-processing, no budget). ``count_std`` /
    ``total_std`` map counter name to the estimate's exact standard deviation (the projection's
    variance: ``P_jj`` times the release's). ``periods_covered`` is the number of periods (over
    all epochs) the revision was computed from.
    """

    kind: ClassVar[RecordKind] = "consistent"

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
    count_std: dict[str, float] = field(default_factory=dict)
    total_std: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.stream}|{self.epoch}|{self.period}"

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
            "counts": self.counts,
            "totals": self.totals,
            "count_std": self.count_std,
            "total_std": self.total_std,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))


@dataclass(frozen=True)
class DeadLetterRecord:
    """A rejected input record. Holds the raw record: protect it like the input topic.

    Construct it with the whole raw record (``raw``: its UTF-8 text, or base64 of its bytes):
    construction measures and digests it (``raw_length`` in bytes, ``raw_sha256``), then keeps
    at most :data:`MAX_DEAD_LETTER_RAW` of it (``raw_truncated``), bounds the message and makes
    every label encodable (see the module doc), so the record always fits
    :data:`MAX_DEAD_LETTER_BYTES`. Passing ``raw_sha256`` says ``raw`` is already a kept copy
    (a record read back): then only the bounds are applied.
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
            original = _raw_bytes(self.raw, self.raw_encoding)
            put(self, "raw_length", len(original))
            put(self, "raw_sha256", hashlib.sha256(original).hexdigest())
        raw, cut = _fit_raw(self.raw, self.raw_encoding)
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
        if offset is not None and (type(offset) is not int or not 0 <= offset <= _MAX_OFFSET):
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
        :data:`MAX_DEAD_LETTER_BYTES` for every dead letter (a property test checks)."""
        return len(self.key.encode("utf-8")) + len(self.to_json().encode("utf-8"))


OutputRecord = ReleaseRecord | ConsistentRecord
#: Every record streamdp writes (public releases and revisions, protected dead letters).
AnyRecord = ReleaseRecord | ConsistentRecord | DeadLetterRecord
