"""The release engine: a plain object (no Kafka) that a Faust agent, a file replay and the
tests all drive the same way (DESIGN §2, §5).

    engine = Engine(spec, sampler=production_sampler(), ledger_backend=JsonLinesLedgerBackend(p))
    publish(engine.advance_clock(now))          # the public clock: closes due periods
    result = engine.ingest(raw_bytes, source_topic="orders", partition=0, offset=42)
    publish(result.dead_letters)
    publish(engine.control(raw_control_bytes))  # operator actions (the control topic only)
    state = engine.snapshot();  Engine(spec, sampler=...).restore(state)

The release schedule is public: a period closes when the public clock (the worker's, never an
event's time) passes its end plus the allowed lateness, or when an operator's close control
record says so. Whether an event counts depends on that event alone and on the clock reading
at its arrival (:meth:`advance_clock` sets it; every record ingested after it arrived then):
never on any other event. Duplicates are true duplicates only (the same bytes in the same
period: a producer retry); a record reusing another's event id counts on its own.

Every output record has ``.key`` and ``.to_json()`` (see :mod:`streamdp.engine.records`).
Raw counts live only in the streams' protected state (and in :meth:`Engine.snapshot`); no
release, dead letter, exception message or statistic carries them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.engine.changes import ChangeSet, ChangeTracker, Spend
from streamdp.engine.events import MAX_ID_LENGTH, Reason, RejectedError, decode, event_id_of
from streamdp.engine.ledger import BudgetLedger, LedgerBackend
from streamdp.engine.periods import format_instant, parse_instant
from streamdp.engine.records import ConsistentRecord, DeadLetterRecord, ReleaseRecord
from streamdp.engine.spec import EngineSpec, SourceSpec
from streamdp.engine.stream import StreamRuntime
from streamdp.errors import InputGapError, StateError
from streamdp.noise.sampler import NoiseSampler

ENGINE_STATE_KIND = "streamdp.engine"
# 2: the public clock reading ("clock") replaces the event-time watermarks of version 1
ENGINE_STATE_VERSION = 2
_RESTORABLE_VERSIONS = (1, 2)

OutputRecord = ReleaseRecord | ConsistentRecord
RawRecord = bytes | bytearray | str | Mapping[str, Any]

# what Engine.consume did with a record
SKIPPED = 0  # its offset was already applied (a replay after a crash)
ACCEPTED = 1  # at least one stream counted it
NOT_COUNTED = 2  # refused by every stream
_NEVER = float("-inf")


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "events_accepted": self.events_accepted,
            "events_rejected": self.events_rejected,
            "controls": self.controls,
            "skipped": self.skipped,
            "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
            "periods_released": dict(self.periods_released),
            "revisions": dict(self.revisions),
        }


class Engine:
    """Ingest events, close periods on the public clock, release, revise, account budget.

    ``batch``: the file replay's mode. Every event of a period still open counts (there is no
    arrival time to judge lateness by: the file is one batch), and periods close only when the
    caller advances the clock, once, to the replay's public ``--as-of`` instant.
    ``pace``: the most periods one stream closes per :meth:`advance_clock` or control record
    (the rest stay due and close at the next call), so one clock jump cannot make one batch
    of unbounded size; None: no limit.
    ``record_outputs``: keep every output record (and ledger spend) made until the next
    :meth:`take_changes` as well as returning it (the daemon's mode: its checkpoint stores them
    in the outbox); off, :meth:`take_changes` has no outputs (a replay publishes what each call
    returns and would otherwise hold every release in memory).
    """

    def __init__(
        self,
        spec: EngineSpec,
        *,
        sampler: NoiseSampler,
        ledger_backend: LedgerBackend | None = None,
        batch: bool = False,
        pace: int | None = None,
        record_outputs: bool = False,
    ) -> None:
        self.spec = spec
        self._fingerprint = spec.fingerprint()  # a hash of the whole spec: once, not per snapshot
        self.sampler = sampler
        self.batch = batch
        if pace is not None and pace < 1:
            raise ValueError(f"pace must be >= 1 period per step, got {pace}")
        self.pace = pace
        self.ledger = BudgetLedger(
            {name: s.epsilon_cap for name, s in spec.sources.items()}, ledger_backend
        )
        self.streams: dict[str, StreamRuntime] = {
            name: StreamRuntime(s, sampler, self._spend) for name, s in spec.streams.items()
        }
        self._by_source: dict[str, list[StreamRuntime]] = {name: [] for name in spec.sources}
        for runtime in self.streams.values():
            self._by_source[runtime.spec.source].append(runtime)
        self._stream_names = {
            name: tuple(r.spec.name for r in runtimes) for name, runtimes in self._by_source.items()
        }
        self._topics: dict[str, SourceSpec] = {}
        for source in spec.sources.values():
            self._topics[source.topic] = source
            self._topics[source.name] = source
        self._single_source = next(iter(spec.sources.values())) if len(spec.sources) == 1 else None
        # the public clock's latest reading: records ingested now arrived at this instant
        self.now: float = _NEVER
        self._offsets: dict[tuple[str, int], int] = {}
        self.stats = EngineStats()
        self._revisions_seen: dict[str, int] = {}  # per stream, the last revision counted
        self._recording = record_outputs
        self._changes = ChangeTracker(record_outputs=record_outputs)

    # ------------------------------------------------------------------ budget
    def _spend(self, source: str, stream: str, epoch: int, epsilon: Decimal) -> object:
        recorded = self.ledger.record_epoch(source, stream, epoch, epsilon)
        if recorded and self._recording:
            self._changes.spend(Spend(source, stream, epoch, epsilon))
        return recorded

    def epsilon_spent(self) -> dict[str, Decimal]:
        """Event-level epsilon spent per source, from the durable ledger."""
        return {name: self.ledger.spent(name) for name in self.spec.sources}

    # ------------------------------------------------------------------ ingest
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
        one after the last applied, i.e. records were lost below the reader.

        Appends the dead letters to ``out`` and returns :data:`SKIPPED` (already applied),
        :data:`ACCEPTED` (some stream counted it) or :data:`NOT_COUNTED` (refused). State and
        outputs are exactly those of :meth:`ingest` (a property test checks); an event every
        stream accepts costs no result object.
        """
        if not self._take_position(source_topic, partition, offset, strict):
            return SKIPPED
        source = self._topics.get(source_topic)
        try:
            event: dict[str, Any] | None = decode(record)
        except RejectedError:
            event = None
        if event is not None and source is not None and event.get("type") != "control":
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
            if strict and offset > last + 1:
                raise InputGapError(
                    f"input {topic}[{partition}] jumped from offset {last} to {offset}: "
                    "records were skipped below the reader"
                )
        self._offsets[position] = offset
        return True

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
        accepted: list[str] = []
        rejections: list[Rejection] = []
        key = content_key(record)
        for runtime in self._by_source[source.name]:
            try:
                runtime.ingest(event, key, ts)
                accepted.append(runtime.spec.name)
            except RejectedError as rejected:
                rejections.append(Rejection(rejected.reason, rejected.message, runtime.spec.name))
        if not rejections:
            self.stats.events_accepted += 1
            return None
        if accepted:
            self.stats.events_accepted += 1
        else:
            self.stats.events_rejected += 1
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

    # ------------------------------------------------------------------ control
    def control(
        self,
        record: RawRecord,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> IngestResult:
        """An operator's control record (from the control topic; never from input).

        The one action is ``close``: ``{"type": "control", "action": "close", "stream": S,
        "through": T}`` releases every period of ``S`` ending at or before ``T`` without
        waiting for its allowed lateness. ``T`` may not be after the clock's reading (the
        future cannot be released), so a close is bounded by the clock; the periods it makes
        due close ``pace`` at a time. Operators must never derive ``T`` from the data (e.g.
        "close when the orders stop"): that would make the schedule depend on events.
        Refused records come back as dead letters (``bad_control``, ``unknown_stream``).
        """
        if self._redelivered(topic, partition, offset):
            return IngestResult(skipped=True)
        try:
            event = decode(record)
            if event.get("type") != "control":
                raise RejectedError(
                    "bad_control", "records on the control topic must have type 'control'"
                )
            outputs = self._close_action(event)
        except RejectedError as rejected:
            return self._reject_record(rejected, record, topic, offset)
        self.stats.controls += 1
        return IngestResult(outputs=tuple(outputs))

    def _close_action(self, event: Mapping[str, Any]) -> list[OutputRecord]:
        action = event.get("action")
        if action != "close":
            raise RejectedError(
                "bad_control",
                f"control 'action' must be 'close', got {action!r} (the 'watermark' action "
                "was removed: periods close on the public clock)",
            )
        stream = event.get("stream")
        if not isinstance(stream, str) or stream not in self.streams:
            raise RejectedError(
                "unknown_stream",
                f"control record names stream {stream!r}; it may name: "
                + ", ".join(self.streams),
            )
        through = parse_instant(event.get("through"))
        if through is None:
            raise RejectedError(
                "bad_control",
                "close control record needs 'through': RFC 3339 text with offset or seconds",
            )
        if through > self.now:
            raise RejectedError(
                "bad_control",
                f"close 'through' {format_instant(through)} is after the worker's clock "
                f"({format_instant(self.now) if self.now > _NEVER else 'not started'}): only "
                "periods that have ended can be released early",
            )
        return self._count(self.streams[stream].close_through(through, self.now, self.pace))

    # ------------------------------------------------------------------ time
    def advance_clock(self, now: float) -> list[OutputRecord]:
        """Move the public clock to ``now`` (it never moves back) and close every due period.

        A period is due when its end plus the allowed lateness is at or before the clock, or
        when an operator's close asked for it; each stream closes at most ``pace`` periods per
        call, oldest first. Records ingested after this call arrived at the clock's reading.
        O(streams) when nothing closes.
        """
        self.now = max(self.now, now)
        out: list[OutputRecord] = []
        current = self.now
        for runtime in self.streams.values():
            if runtime.next_deadline <= current:
                out.extend(self._count(runtime.close_due(current, self.pace)))
            runtime.set_arrival(current, batch=self.batch)
        return out

    def start_batch(self, as_of: float) -> None:
        """Batch mode (a file replay): set the clock's reading to ``as_of`` for judging the
        records that follow (only the future limit applies) without closing anything; the
        caller closes with :meth:`advance_clock` once the whole batch is in."""
        if not self.batch:
            raise ValueError("start_batch needs an engine made with batch=True")
        self.now = max(self.now, as_of)
        for runtime in self.streams.values():
            runtime.set_arrival(self.now, batch=True)

    def close(self, stream: str, through: float) -> list[OutputRecord]:
        """Close every period of ``stream`` ending at or before ``through`` now (an operator
        action from code: no clock bound, no pacing)."""
        return self._count(self.streams[stream].close_through(through, self.now))

    def due(self) -> bool:
        """True when some stream has a period to close at the clock's reading."""
        return any(r.next_deadline <= self.now for r in self.streams.values())

    def revise(self, stream: str) -> list[ConsistentRecord]:
        """Publish a consistent revision of ``stream`` now (outside its schedule): the
        periods released since the last revision, if any."""
        records = self.streams[stream].revise()
        self._count(list(records))
        return records

    def _count(self, records: list[OutputRecord]) -> list[OutputRecord]:
        """Count the step's releases and revisions in the statistics and, when recording,
        keep them by kind for :meth:`take_changes` (the one place outputs are sorted)."""
        recording = self._recording
        for record in records:
            if isinstance(record, ReleaseRecord):
                if record.counter == self.streams[record.stream].names[0]:
                    self.stats.periods_released[record.stream] += 1
                if recording:
                    self._changes.release(record)
                continue
            if record.revision > self._revisions_seen.get(record.stream, 0):
                # the first record of a new revision (a revision publishes new periods only)
                self._revisions_seen[record.stream] = record.revision
                self.stats.revisions[record.stream] += 1
            if recording:
                self._changes.revision(record)
        return records

    # ------------------------------------------------------------------ persistence
    def snapshot(
        self, *, with_seen: bool = True, with_noise: bool = True, with_nodes: bool = True
    ) -> dict[str, Any]:
        """The complete state as plain JSON-able data (protect it like the input topic).

        ``with_seen=False`` leaves out the open periods' content keys, ``with_noise=False`` the
        k-ary streams' epoch noise, ``with_nodes=False`` every noisy node, each stream saying
        how many it has under ``node_counts``. With all three off this is the *hot* state of
        :meth:`take_changes` (which hands out the rest as it changes): its cost does not grow
        with the periods closed (the ledger's spends are runs of epochs)."""
        return {
            "kind": ENGINE_STATE_KIND,
            "version": ENGINE_STATE_VERSION,
            "spec_fingerprint": self._fingerprint,
            "noise": {"name": self.sampler.name, "secure": bool(self.sampler.secure)},
            "clock": self.now if self.now > _NEVER else None,
            "offsets": [[t, p, o] for (t, p), o in sorted(self._offsets.items())],
            "ledger": self.ledger.state(),
            "stats": self.stats.to_dict(),
            "streams": {
                name: r.state(with_seen=with_seen, with_noise=with_noise, with_nodes=with_nodes)
                for name, r in self.streams.items()
            },
        }

    def take_changes(self) -> ChangeSet:
        """Everything that changed since the last call (or :meth:`restore`), marked taken: the
        hot state, the noisy nodes, k-ary epoch noise and event ids drawn or counted since,
        the periods closed, and (with ``record_outputs``) the outputs and ledger spends made
        (see :class:`~streamdp.engine.changes.ChangeSet`). O(what changed), whatever the
        history. A caller must store the change set before it publishes anything in it."""
        hot = self.snapshot(with_seen=False, with_noise=False, with_nodes=False)
        return self._changes.take(self.streams, hot)

    def drop_recorded_outputs(self) -> None:
        """Forget the outputs and spends recorded since the last :meth:`take_changes` (a
        benchmark closing a history it does not publish); nodes, noise and ids stay to take."""
        self._changes.drop_outputs()

    def adopt_stored_nodes(self, nodes: Mapping[tuple[str, int, int], list[int]]) -> None:
        """Noisy nodes ``(stream, epoch, node) -> values`` stored before a crash lost the state
        that refers to them: reused when their periods close, never drawn again (see
        :meth:`StreamRuntime.adopt_stored_nodes`)."""
        for name, runtime in self.streams.items():
            runtime.adopt_stored_nodes(
                {(e, t): v for (stream, e, t), v in nodes.items() if stream == name}
            )
        self._changes.adopted_nodes(nodes)

    def epoch_noise(self) -> dict[str, tuple[int, npt.NDArray[np.int64]]]:
        """Per k-ary stream whose current epoch's noise is drawn: ``(epoch, node noise)`` (what
        a restored engine holds; :meth:`take_changes` hands out what is drawn later)."""
        out = {}
        for name, runtime in self.streams.items():
            drawn = runtime.epoch_noise()
            if drawn is not None:
                out[name] = drawn
        return out

    def adopt_stored_noise(self, stream: str, epoch: int, node_noise: list[list[int]]) -> bool:
        """Epoch noise of ``stream`` stored before a crash lost the state that refers to it:
        used instead of drawing (see :meth:`StreamRuntime.adopt_stored_noise`). False when it
        is not a whole epoch's noise for this stream (ignored)."""
        runtime = self.streams.get(stream)
        adopted = runtime is not None and runtime.adopt_stored_noise(epoch, node_noise)
        if adopted:
            self._changes.adopted_noise(stream, epoch)
        return adopted

    def hand_out_again(self, *, ids_of: Iterable[str] = (), noise_of: Iterable[str] = ()) -> None:
        """After :meth:`restore` from a layout that kept the open periods' event ids (epoch
        noise) of streams ``ids_of`` (``noise_of``) inside the hot state: the next
        :meth:`take_changes` hands them out whole, so that they get stored on their own."""
        self._changes.hand_out_again(ids_of=ids_of, noise_of=noise_of)

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`snapshot` output into this engine (same spec); draws no noise."""
        if (
            state.get("kind") != ENGINE_STATE_KIND
            or state.get("version") not in _RESTORABLE_VERSIONS
        ):
            raise StateError(
                f"not an engine snapshot of version {ENGINE_STATE_VERSION} "
                f"(kind={state.get('kind')!r}, version={state.get('version')!r})"
            )
        # a state stored before the configuration keys were renamed (format 1) carries the
        # fingerprint of the old names: it restores under the same configuration renamed
        if state.get("spec_fingerprint") not in self.spec.fingerprints():
            raise StateError(
                "snapshot was taken under a different configuration; restore it with the "
                "configuration it was taken with"
            )
        try:
            streams = dict(state["streams"])
            for name, runtime in self.streams.items():
                if name not in streams:
                    raise StateError(f"snapshot has no state for stream {name!r}")
                runtime.restore(streams[name])
            self.ledger.merge(list(state["ledger"]))
            clock = state.get("clock")
            self.now = _NEVER if clock is None else float(clock)
            self._offsets = {(str(t), int(p)): int(o) for t, p, o in state["offsets"]}
            stats = dict(state["stats"])
        except StateError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(f"engine snapshot is malformed ({type(error).__name__})") from None
        self.stats = EngineStats(
            events_accepted=int(stats.get("events_accepted", 0)),
            events_rejected=int(stats.get("events_rejected", 0)),
            controls=int(stats.get("controls", 0)),
            skipped=int(stats.get("skipped", 0)),
            rejected_by_reason=Counter(dict(stats.get("rejected_by_reason", {}))),
            periods_released=Counter(dict(stats.get("periods_released", {}))),
            revisions=Counter(dict(stats.get("revisions", {}))),
        )
        self._revisions_seen = {name: r.revision for name, r in self.streams.items()}
        self._changes.restored(self.streams)  # what was restored is stored
        if self.now > _NEVER:
            for runtime in self.streams.values():
                runtime.set_arrival(self.now, batch=self.batch)


def content_key(record: RawRecord) -> str:
    """A digest of the record's exact content (128-bit BLAKE2b, hex): equal for a producer's
    retry or a redelivery of the same record, different for any other record."""
    if isinstance(record, Mapping):
        data = json.dumps(record, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    elif isinstance(record, str):
        data = record.encode("utf-8", "surrogatepass")
    else:
        data = bytes(record)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def raw_text(record: RawRecord) -> tuple[str, str]:
    """The raw record as text for a dead letter: UTF-8, else base64 of the bytes."""
    if isinstance(record, Mapping):
        try:
            return json.dumps(record, sort_keys=True, default=str), "utf-8"
        except (TypeError, ValueError):
            return repr(dict(record)), "utf-8"
    if isinstance(record, str):
        return record, "utf-8"
    try:
        return bytes(record).decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(bytes(record)).decode("ascii"), "base64"
