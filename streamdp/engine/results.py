"""What the engine's calls return: the outcome codes of :meth:`Engine.consume
<streamdp.engine.engine.Engine.consume>`, :class:`IngestResult` with its :class:`Rejection`s,
and the record counts of :class:`EngineStats` (safe to log and export: counts of records, never
of protected data)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamdp.engine.events import Reason
from streamdp.engine.records import ConsistentRecord, DeadLetterRecord, ReleaseRecord

OutputRecord = ReleaseRecord | ConsistentRecord
RawRecord = bytes | bytearray | str | Mapping[str, Any]

# what Engine.consume did with a record
SKIPPED = 0  # its offset was already applied (a replay after a crash)
ACCEPTED = 1  # at least one stream counted it
NOT_COUNTED = 2  # refused by every stream
#: the clock reading of an engine whose clock never advanced
NEVER = float("-inf")


@dataclass(frozen=True)
class Rejection:
    """Why one stream (or the whole record, ``stream is None``) refused a record."""

    reason: Reason
    message: str
    stream: str | None = None


@dataclass(slots=True)
class IngestResult:
    """What :meth:`Engine.ingest` did with one record.

    ``accepted``: streams that counted the event. ``rejections``/``dead_letters``: one per
    refusing stream (or one for the record). ``outputs``: records an operator action produced.
    ``skipped``: the (topic, partition, offset) was already applied (a replay after a crash);
    nothing was done. Treat it as read-only (not frozen: a frozen dataclass costs a
    microsecond per event).
    """

    accepted: tuple[str, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    dead_letters: tuple[DeadLetterRecord, ...] = ()
    outputs: tuple[OutputRecord, ...] = ()
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing was rejected."""
        return not self.rejections


@dataclass
class EngineStats:
    """Counts of records processed (not of protected data): safe to log and export."""

    events_accepted: int = 0
    events_rejected: int = 0
    controls: int = 0
    skipped: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)
    periods_released: Counter[str] = field(default_factory=Counter)
    revisions: Counter[str] = field(default_factory=Counter)
    # records a stream dropped as beyond their privacy unit's bounds, by stream (issue 28)
    dropped_over_unit_bound: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "events_accepted": self.events_accepted,
            "events_rejected": self.events_rejected,
            "controls": self.controls,
            "skipped": self.skipped,
            "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
            "periods_released": dict(self.periods_released),
            "revisions": dict(self.revisions),
            "dropped_over_unit_bound": dict(sorted(self.dropped_over_unit_bound.items())),
        }
