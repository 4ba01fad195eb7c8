"""The engine's per-record path: input records read from a (topic, partition) at an offset,
skipped when already applied (at-least-once input, exactly-once effect), decoded, checked and
counted in every stream of their source, or refused with one dead letter per refusing stream.
:class:`RecordIntake` is a base of :class:`~streamdp.engine.engine.Engine`, which owns the
state it names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streamdp.engine.changes import ChangeTracker
from streamdp.engine.events import (
    MAX_ID_LENGTH,
    RejectedError,
    UnitBoundDrop,
    decode,
    event_id_of,
)
from streamdp.engine.periods import parse_instant
from streamdp.engine.raw_records import content_key, raw_text
from streamdp.engine.records import DeadLetterRecord
from streamdp.engine.results import (
    ACCEPTED,
    NOT_COUNTED,
    SKIPPED,
    EngineStats,
    IngestResult,
    OutputRecord,
    RawRecord,
    Rejection,
)
from streamdp.engine.scanned_orders import ScannedSource
from streamdp.engine.spec import EngineSpec, SourceSpec
from streamdp.engine.stream import StreamRuntime
from streamdp.errors import InputGapError


class RecordIntake:
    """Ingest and consume input records (see :class:`~streamdp.engine.engine.Engine`)."""

    spec: EngineSpec
    stats: EngineStats
    _offsets: dict[tuple[str, int], int]
    _topics: dict[str, SourceSpec]
    _by_source: dict[str, list[StreamRuntime]]
    _stream_names: dict[str, tuple[str, ...]]
    _single_source: SourceSpec | None
    _recording: bool
    _changes: ChangeTracker
    _scanned: dict[str, ScannedSource]
    #: ``(topic, partition, start, stop)`` -> True when offsets ``start`` to ``stop - 1`` hold
    #: no record by Kafka's design (transaction markers): such a hole is not a lost record
    known_holes: Callable[[str, int, int, int], bool] | None = None

    def ingest(
        self,
        record: RawRecord,
        *,
        source_topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> IngestResult:
        """Validate and count one input record, arrived at the clock's current reading
        (:meth:`advance_clock`). Never raises on bad input.

        ``source_topic``: the topic it was read from (else the record's ``source`` field, else
        the only configured source). ``partition``/``offset``: its position; an offset at or
        below the last applied one of that (topic, partition) is skipped (at-least-once input,
        exactly-once effect). A control record here is refused (``control_on_input``): operator
        actions come only through :meth:`control`.
        """
        if self._redelivered(source_topic, partition, offset):
            return IngestResult(skipped=True)
        return self._ingest_new(record, source_topic, offset)

    def consume(  # noqa: PLR0917 - the per-record path, called positionally
        self,
        record: bytes,
        source_topic: str,
        partition: int,
        offset: int,
        out: list[OutputRecord | DeadLetterRecord],
        strict: bool = False,
    ) -> int:
        """:meth:`ingest` of a record read from ``(source_topic, partition)`` at ``offset``:
        the daemon's per-record path. ``strict``: raise
        :class:`~streamdp.errors.InputGapError` (changing nothing) when the offset is not the
        one after the last applied, i.e. records were lost below the reader, unless
        :attr:`known_holes` says the offsets between hold no record.

        Appends the dead letters to ``out`` and returns :data:`SKIPPED` (already applied),
        :data:`ACCEPTED` (some stream counted it) or :data:`NOT_COUNTED` (refused). State and
        outputs are exactly those of :meth:`ingest` (a property test checks); an event every
        stream accepts costs no result object. Records of a source with a native scanner are
        first offered to it (:mod:`streamdp.engine.scanned_orders`): what it counts, it counts
        exactly as the Python path below would; everything else goes on below.
        """
        if not self._take_position(source_topic, partition, offset, strict):
            return SKIPPED
        scanned = self._scanned.get(source_topic)
        if scanned is not None:
            read = scanned.scan(record)
            if read is not None and scanned.count(*read):
                self.stats.events_accepted += 1
                return ACCEPTED
        source = self._topics.get(source_topic)
        try:
            event: dict[str, Any] | None = decode(record)
        except RejectedError:
            event = None
        if event is not None and source is not None and event.get("type", "event") == "event":
            named = event.get("source")
            event_id = event.get("event_id")
            ts = parse_instant(event.get("event_time"))
            if (
                ts is not None
                and (named is None or named in (source.name, source.topic))
                and type(event_id) is str
                and 0 < len(event_id) <= MAX_ID_LENGTH
            ):
                # a well-formed event of this topic's source
                refused = self._count_event(
                    record, source, source_topic, offset, event, event_id, ts
                )
                if refused is None:
                    return ACCEPTED
                return self._emit(refused, out)
        return self._emit(self._ingest_new(record, source_topic, offset), out)

    def mark_handled(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        strict: bool = False,
        letter: DeadLetterRecord | None = None,
    ) -> bool:
        """Record that the input at ``offset`` was handled outside the engine (refused before
        routing), so the applied offsets of ``(source_topic, partition)`` have no hole. False
        when it was already applied (a replay after a crash: handle it as skipped).
        ``strict`` as in :meth:`consume`. ``letter``: the dead letter the caller made of it,
        an output of this step (see :meth:`take_changes`) when it was not applied before."""
        if not self._take_position(source_topic, partition, offset, strict):
            return False
        if letter is not None and self._recording:
            self._changes.dead_letter(letter)
        return True

    def applied_offset(self, topic: str, partition: int) -> int | None:
        """The last offset of ``(topic, partition)`` applied (None: none yet)."""
        return self._offsets.get((topic, partition))

    def _redelivered(self, topic: str | None, partition: int | None, offset: int | None) -> bool:
        """True when a record at this known position was already applied (skip it); records
        without a position (a file, a test) are never re-deliveries."""
        if topic is None or partition is None or offset is None:
            return False
        return not self._take_position(topic, partition, offset, strict=False)

    def _take_position(self, topic: str, partition: int, offset: int, strict: bool) -> bool:
        """Move the applied offset of (topic, partition) to ``offset``; False if it is there
        already (a re-delivery)."""
        position = (topic, partition)
        last = self._offsets.get(position)
        if last is not None:
            if offset <= last:
                self.stats.skipped += 1
                return False
            if (
                strict
                and offset > last + 1
                and not self._known_hole(topic, partition, last, offset)
            ):
                raise InputGapError(
                    f"input {topic}[{partition}] jumped past records below the reader: they "
                    "were skipped",
                    offsets=f"from offset {last} to {offset}",
                )
        self._offsets[position] = offset
        return True

    def _known_hole(self, topic: str, partition: int, last: int, offset: int) -> bool:
        known = self.known_holes
        return known is not None and known(topic, partition, last + 1, offset)

    @staticmethod
    def _emit(result: IngestResult, out: list[OutputRecord | DeadLetterRecord]) -> int:
        out += result.dead_letters
        out += result.outputs
        return ACCEPTED if result.accepted else NOT_COUNTED

    def _ingest_new(
        self, record: RawRecord, source_topic: str | None, offset: int | None
    ) -> IngestResult:
        try:
            event = decode(record)
            if event.get("type") == "control":
                raise RejectedError(
                    "control_on_input",
                    "control records are obeyed only from the control topic (an operator "
                    "surface), never from an input topic or file that any producer can write",
                )
            if "type" in event and event["type"] != "event":  # the event schemas' const
                raise RejectedError(
                    "schema_violation", "field 'type' must be \"event\" when given (or left out)"
                )
            source = self._resolve_source(event, source_topic)
            event_id = event_id_of(event)
            if "event_time" not in event:
                raise RejectedError("schema_violation", "field 'event_time' is missing")
            ts = parse_instant(event["event_time"])
            if ts is None:
                raise RejectedError(
                    "bad_timestamp",
                    "field 'event_time' must be RFC 3339 text with a UTC offset "
                    "(e.g. 2024-05-01T12:00:00Z) or seconds since the Unix epoch",
                )
        except RejectedError as rejected:
            return self._reject_record(rejected, record, source_topic, offset)
        refused = self._count_event(record, source, source_topic, offset, event, event_id, ts)
        if refused is not None:
            return refused
        return IngestResult(accepted=self._stream_names[source.name])

    def _count_event(  # noqa: PLR0917 - the per-record path, called positionally
        self,
        record: RawRecord,
        source: SourceSpec,
        source_topic: str | None,
        offset: int | None,
        event: Mapping[str, Any],
        event_id: str,
        ts: float,
    ) -> IngestResult | None:
        """Count a well-formed event in every stream of its source. None when every stream
        counted it; else the result with one dead letter per refusing stream."""
        rejections: list[Rejection] | None = None
        dropped: list[str] | None = None
        key = content_key(record)
        for runtime in self._by_source[source.name]:
            try:
                runtime.ingest(event, key, ts)
            except RejectedError as rejected:
                if rejections is None:
                    rejections = []
                rejections.append(Rejection(rejected.reason, rejected.message, runtime.spec.name))
            except UnitBoundDrop:
                # beyond its privacy unit's bounds: dropped, counted here only (protected)
                self.stats.dropped_over_unit_bound[runtime.spec.name] += 1
                if dropped is None:
                    dropped = []
                dropped.append(runtime.spec.name)
        if rejections is None and dropped is None:  # every stream counted it: nothing to build
            self.stats.events_accepted += 1
            return None
        refused_by = {r.stream for r in rejections or ()} | set(dropped or ())
        accepted = [
            runtime.spec.name
            for runtime in self._by_source[source.name]
            if runtime.spec.name not in refused_by
        ]
        if accepted:
            self.stats.events_accepted += 1
        elif rejections:
            self.stats.events_rejected += 1
        if rejections is None:
            return IngestResult(accepted=tuple(accepted))
        letters = []
        raw, encoding = raw_text(record)
        for r in rejections:
            self.stats.rejected_by_reason[r.reason] += 1
            letter = DeadLetterRecord(
                reason=r.reason,
                message=r.message,
                raw=raw,
                raw_encoding=encoding,
                stream=r.stream,
                source=source.name,
                topic=source_topic,
                offset=offset,
                event_id=event_id,
            )
            letters.append(letter)
            if self._recording:
                self._changes.dead_letter(letter)
        return IngestResult(
            accepted=tuple(accepted), rejections=tuple(rejections), dead_letters=tuple(letters)
        )

    def _resolve_source(self, event: Mapping[str, Any], topic: str | None) -> SourceSpec:
        named = event.get("source")
        if topic is not None and named is not None:
            by_topic = self._topics.get(topic)
            if by_topic is not None and named not in (by_topic.name, by_topic.topic):
                raise RejectedError(
                    "unknown_source",
                    f"record names source {named!r} but arrived on topic {topic!r}, which "
                    f"carries source {by_topic.name!r}; fix the producer's 'source' field",
                )
        name = topic if topic is not None else named
        if name is None:
            if self._single_source is not None:
                return self._single_source
            raise RejectedError(
                "unknown_source",
                "record names no 'source' and several sources are configured: "
                + ", ".join(self.spec.sources),
            )
        source = self._topics.get(name) if isinstance(name, str) else None
        if source is None:
            raise RejectedError(
                "unknown_source",
                f"source {name!r} is not configured; configured: {', '.join(self.spec.sources)}",
            )
        return source

    def _reject_record(
        self, rejected: RejectedError, record: RawRecord, topic: str | None, offset: int | None
    ) -> IngestResult:
        self.stats.events_rejected += 1
        self.stats.rejected_by_reason[rejected.reason] += 1
        raw, encoding = raw_text(record)
        event_id = None
        source = None
        if isinstance(record, Mapping) or rejected.reason != "malformed":
            try:
                event = decode(record)
                candidate = event.get("event_id")
                event_id = candidate if isinstance(candidate, str) and candidate else None
                src = event.get("source")
                source = src if isinstance(src, str) and src in self._topics else None
            except RejectedError:
                pass
        letter = DeadLetterRecord(
            reason=rejected.reason,
            message=rejected.message,
            raw=raw,
            raw_encoding=encoding,
            source=source,
            topic=topic,
            offset=offset,
            event_id=event_id,
        )
        if self._recording:
            self._changes.dead_letter(letter)
        return IngestResult(
            rejections=(Rejection(rejected.reason, rejected.message),), dead_letters=(letter,)
        )
