"""The daemon's release service: the engine driven batch by batch, with no Kafka in it.

The Faust agent hands :meth:`ReleaseService.process` a batch of input records (topic,
partition, offset, key, value). The service routes each record to the engine of its source
(one :class:`~streamdp.engine.Engine` per source, so a source's state moves between workers as
one unit), and returns a :class:`BatchOutcome`: what to make durable, then publish, then
clean up, in that order (:mod:`streamdp.daemon.outcome` says why a crash anywhere in between is
safe). Records of one source must all arrive on its *home* partition
(:mod:`streamdp.daemon.routing`); others are dead-lettered before touching any state.

The service is split by concern: routing (:mod:`streamdp.daemon.routing`), loading a source
after a restart (:mod:`streamdp.daemon.recovery`), the checkpoint made of the engine's change
set (:mod:`streamdp.daemon.checkpoint_writer`, keys in :mod:`streamdp.daemon.checkpoint`) and
this driver.

Time is the public clock the service is given (the worker's wall clock in production). A batch
only reads it: each record is judged at the instant :mod:`streamdp.daemon.arrival` gives (its
own Kafka timestamp, or its receipt less the delivery allowance when later; a record sent after
its period's close instant is late, closed or not), and nothing closes. Only :meth:`tick`
closes periods, at the public instant the caller's timer scheduled it for (each close instant
plus the allowance, and a fixed catch-up step after downtime:
:mod:`streamdp.daemon.tick_schedule`), and its
releases carry that instant as their timestamp: when a period is published, and what the
record timestamps and metrics say about it, depend on the clock alone, never on whether or
when records arrive. Control records come only from the control topic; a close they ask for
is made by the next tick too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from streamdp.daemon.arrival import ArrivalRule, BrokerStampWarning
from streamdp.daemon.checkpoint import hot_key
from streamdp.daemon.checkpoint_writer import (
    SourceSlot,
    write_checkpoint,
)
from streamdp.daemon.close_witness import check_closes
from streamdp.daemon.outcome import BatchOutcome, Publication
from streamdp.daemon.recovery import load_slot
from streamdp.daemon.resume_check import check_resume
from streamdp.daemon.routing import (
    InputLike,
    OutputTopics,
    Run,
    dead_letter,
    home_partition,
    misplaced,
    runs_of,
    source_of_control,
    source_spec,
)
from streamdp.daemon.skipped_offsets import SkippedOffsets
from streamdp.engine import DeadLetterRecord, Engine, EngineSpec
from streamdp.engine.changes import OutputRecord
from streamdp.engine.events import RejectedError, decode
from streamdp.engine.ledger import MemoryLedgerBackend
from streamdp.engine.results import ACCEPTED, SKIPPED
from streamdp.engine.spec import SourceSpec
from streamdp.errors import InputGapError
from streamdp.noise.sampler import NoiseSampler

#: Most periods one stream closes per tick (after downtime the backlog is worked off in steps
#: of this many periods, one step per catch-up tick: a pace set by the clock alone).
CLOSE_PACE = 32


class ReleaseService:
    """Per-source engines over a keyed state store (a Faust table's local data in the daemon,
    a dict in tests); see the module docstring for the checkpoint protocol."""

    def __init__(
        self,
        spec: EngineSpec,
        *,
        sampler: NoiseSampler,
        state: MutableMapping[str, Any],
        topics: OutputTopics | None = None,
        topic_partitions: Mapping[str, int] | None = None,
        allow_gaps: bool = False,
        skipped_offsets: SkippedOffsets | None = None,
        clock: Callable[[], float] = time.time,
        pace: int = CLOSE_PACE,
        unit_key: bytes | None = None,
        reading_at: Callable[[float], float] | None = None,
        allowance: float = 0.0,
        committed_offset: Callable[[str, int], int] | None = None,
        closes_witnessed: Callable[[str, int], Mapping[str, int]] | None = None,
        warn_broker_stamps: bool = False,
    ) -> None:
        self.spec = spec
        # the input group's committed offset of (topic, partition), the next offset to read
        # (0: none), as the consumer learned it when the partition was assigned: a source's
        # stored state must have applied every record below it (see _check_resume)
        self.committed_offset = committed_offset
        # the closes (source -> periods closed) the input group's commit of (topic,
        # partition) witnesses, as read when the partition was assigned: a source's stored
        # state must have closed at least as many (see :mod:`streamdp.daemon.close_witness`)
        self.closes_witnessed = closes_witnessed
        # the public clock's reading at a wall-clock instant: with it, a record is judged at
        # its Kafka timestamp's reading, or at its receipt less ``allowance`` (public-clock
        # seconds from a close instant to the release) when that is later (see process_runs)
        self.reading_at = reading_at
        self.allowance = allowance
        self.unit_key = unit_key
        self.clock = clock
        self.pace = pace
        self.sampler = sampler
        self.state = state
        self.topics = topics or OutputTopics()
        self.topic_partitions = dict(topic_partitions or {})
        self.allow_gaps = allow_gaps
        # offsets the Kafka client passed over (transaction markers): holes made of them only
        # are not lost records, so they do not stop a batch even when holes are refused
        self.skipped_offsets = skipped_offsets
        # a record stamped by the broker is warned about on arrival only where the logs are
        # protected (--input-volume-metrics): the warning's moment says a record arrived; the
        # worker's start warns from the topic's configuration instead (topic_check)
        self._stamps = BrokerStampWarning() if warn_broker_stamps else None
        self.slots: dict[str, SourceSlot] = {}
        self._by_topic: dict[str, SourceSpec] = {s.topic: s for s in spec.sources.values()}
        # the partitioning key every record of a source must carry
        self._source_keys = {name: name.encode() for name in spec.sources}
        # topics whose records need no key (one partition: nothing can land elsewhere)
        self._unkeyed_topics = {t for t, n in self.topic_partitions.items() if n == 1}
        # each source's home partition, where its topic's partition count is known
        self._homes: dict[str, int] = {}
        for source in spec.sources.values():
            n = self.topic_partitions.get(source.topic)
            if n:
                self._homes[source.name] = home_partition(source.name, n)

    # ------------------------------------------------------------------ loading
    def _load(
        self, source: str, home: int, outcome: BatchOutcome, *, create: bool = True
    ) -> SourceSlot | None:
        """The source's slot: loaded from the state table, else (``create``) a new one homed
        on partition ``home``, else None."""
        slot = self.slots.get(source)
        if slot is not None:
            return slot
        hot = self.state.get(hot_key(source))
        if hot is None and not create:
            return None
        engine = Engine(
            source_spec(self.spec, source),
            sampler=self.sampler,
            ledger_backend=MemoryLedgerBackend(),
            pace=self.pace,
            record_outputs=True,
            unit_key=self.unit_key,
        )
        if self.skipped_offsets is not None:
            engine.known_holes = self.skipped_offsets.covers
        slot = load_slot(self.state, source, engine, home, hot, outcome)
        self._check_resume(source, slot, stored=hot is not None)
        self.slots[source] = slot
        return slot

    def _check_resume(self, source: str, slot: SourceSlot, *, stored: bool) -> None:
        """Refuse a source whose state (``stored``: loaded from the table, else new) is
        behind the input group's commits: their offsets (:mod:`streamdp.daemon.resume_check`)
        or the closes they witness (:mod:`streamdp.daemon.close_witness`); without the
        callbacks, nothing to check."""
        topic = self.spec.sources[source].topic
        if self.committed_offset is not None:
            check_resume(
                source,
                topic,
                slot.home,
                committed=self.committed_offset(topic, slot.home),
                applied=slot.engine.applied_offset(topic, slot.home),
            )
        if self.closes_witnessed is not None:
            witnessed = self.closes_witnessed(topic, slot.home).get(source)
            if witnessed is not None:
                check_closes(
                    source,
                    topic,
                    slot.home,
                    witnessed=witnessed,
                    stored=slot.engine.periods_closed() if stored else None,
                )

    def closes_by_partition(self) -> dict[tuple[str, int], dict[str, int]]:
        """Per input partition ``(topic, home)``, the periods each source homed there and
        loaded here has closed (the witness its commits carry)."""
        out: dict[tuple[str, int], dict[str, int]] = {}
        for name, slot in self.slots.items():
            topic = self.spec.sources[name].topic
            out.setdefault((topic, slot.home), {})[name] = slot.engine.periods_closed()
        return out

    def drop(self, partitions: Iterable[int]) -> list[str]:
        """Forget the sources whose home partition was revoked (their state stays in the table
        and is reloaded by whichever worker gets the partition). Returns the dropped sources."""
        gone = set(partitions)
        dropped = [name for name, slot in self.slots.items() if slot.home in gone]
        for name in dropped:
            del self.slots[name]
        return dropped

    # ------------------------------------------------------------------ processing
    def process(self, batch: Sequence[InputLike]) -> BatchOutcome:
        """Ingest a batch of records; see :meth:`process_runs`."""
        return self.process_runs(runs_of(batch))

    def process_runs(
        self, runs: Iterable[Run], readings: Sequence[float] | None = None
    ) -> BatchOutcome:
        """Ingest a batch given as runs (each one partition's records in offset order);
        returns the checkpoint writes, publications and cleanup to perform.

        ``readings``, one per run (non-decreasing), are the public clock's readings when each
        run was received (:class:`~streamdp.daemon.batch_input.BatchQueue`). Without them
        every record was received at the clock's reading now.

        With ``reading_at`` (the worker), each record is judged (late, too far ahead) at the
        instant :class:`~streamdp.daemon.arrival.ArrivalRule` gives: its own Kafka timestamp,
        or its receipt less ``allowance`` when that is later. Without ``reading_at``, every
        record is judged at its receipt reading.

        A record of an input topic belongs to the topic's source, whose engine keeps the
        applied offsets of that (topic, partition) with no hole: a record refused before
        reaching the engine (wrongly keyed) is marked handled there, so neither the next
        record nor a restart after it looks like input skipped below the worker. Records of the
        control topic are routed by the stream or source they name; their offsets are sparse
        per source, so only duplicates are checked there, not holes.
        """
        outcome = BatchOutcome()
        touched: dict[str, SourceSlot] = {}
        batch_now = self.clock() if readings is None else 0.0
        try:
            for index, run in enumerate(runs):
                if not run:
                    continue
                now = batch_now if readings is None else readings[index]
                owner = self._by_topic.get(run[0].topic)
                if owner is None:
                    for record in run:
                        self._from_other_topic(record, outcome, touched, now)
                else:
                    self._run_of_source(owner, run, outcome, touched, now)
        except InputGapError as gap:
            # state of this batch is in memory only: the caller must not acknowledge it
            raise InputGapError(
                f"{gap}; restarting from the last checkpoint (use --allow-input-gaps only for "
                "topics whose offsets have holes the worker can never read, e.g. records removed "
                "before they were read)",
                offsets=gap.offsets,
            ) from None
        for name, slot in touched.items():
            write_checkpoint(name, slot, slot.engine.take_changes(), self.topics, outcome)
        return outcome

    def _run_of_source(
        self,
        owner: SourceSpec,
        run: Run,
        outcome: BatchOutcome,
        touched: dict[str, SourceSlot],
        now: float,
    ) -> None:
        """One partition's records of an input topic, all for the topic's source ``owner``."""
        topic, partition = run[0].topic, run[0].partition
        name = owner.name
        key = self._source_keys[name]
        any_key = topic in self._unkeyed_topics
        home = self._homes.get(name)
        if home is not None and partition != home:
            # not the source's home partition: nothing of its state may change here
            for record in run:
                self._emit_unrouted(misplaced(record, owner), outcome)
            return
        slot = self.slots.get(name)
        start = 0
        while slot is None and start < len(run):
            # no state of the source here yet: a correctly keyed record creates it, and any
            # record on its known home partition (the worker's assignment would start it
            # anyway; so every record the group commits there was applied by its state)
            record = run[start]
            create = any_key or home is not None or record.key == key
            slot = self._load(name, partition, outcome, create=create)
            if slot is None:
                self._emit_unrouted(misplaced(record, owner), outcome)
                start += 1
        if slot is None:
            return
        records = run if start == 0 else run[start:]
        if partition != slot.home:
            # the source's state is on another partition: nothing of it may change here
            for record in records:
                self._emit_unrouted(misplaced(record, owner), outcome)
            return
        self._touch(name, slot, touched, now)
        engine = slot.engine
        consume = engine.consume
        strict = not self.allow_gaps
        accepted = skipped = 0
        # the engine keeps the batch's outputs for its change set (the checkpoint reads them
        # there); what consume also appends here is not used
        returned: list[OutputRecord] = []
        judged = engine.now  # the instant observe_clock set the window at
        rule = (
            None
            if self.reading_at is None
            else ArrivalRule(self.reading_at, self.allowance, judged)
        )
        if self._stamps is not None:
            self._stamps.check(records[0])
        for record in records:
            offset = record.offset
            if rule is not None and (instant := rule.instant(record)) != judged:
                engine.judge_arrival_at(instant)
                judged = instant
            if any_key or record.key == key:
                value = record.value
                code = consume(
                    b"" if value is None else value, topic, partition, offset, returned, strict
                )
                if code == ACCEPTED:
                    accepted += 1
                elif code == SKIPPED:
                    skipped += 1
            elif not engine.mark_handled(
                topic, partition, offset, strict, misplaced(record, owner)
            ):
                skipped += 1
        outcome.accepted += accepted
        outcome.skipped += skipped

    @staticmethod
    def _touch(name: str, slot: SourceSlot, touched: dict[str, SourceSlot], now: float) -> None:
        """Source ``name``'s clock reading moves to ``now`` before a run of its records (they
        arrived then; nothing closes); it is checkpointed after the batch."""
        touched[name] = slot
        slot.engine.observe_clock(now)

    def _from_other_topic(
        self, record: InputLike, outcome: BatchOutcome, touched: dict[str, SourceSlot], now: float
    ) -> None:
        """A record of the control topic (routed to the source it names) or of a topic no
        source reads."""
        value = b"" if record.value is None else record.value
        source = None
        decoded = None
        if record.topic == self.topics.control:
            # read once here, for routing and for the engine (None: refused, the engine says why)
            with contextlib.suppress(RejectedError):
                decoded = decode(value)
            source = source_of_control(self.spec, self._by_topic, value, decoded)
        if source is None:
            letter = dead_letter(
                record,
                "unknown_source" if record.topic != self.topics.control else "bad_control",
                "the topic is not configured"
                if record.topic != self.topics.control
                else "a control record must be a JSON object naming a configured 'stream'",
            )
            self._emit_unrouted(letter, outcome)
            return
        name = source.name
        topic, partition = record.topic, record.partition
        home = self._homes.get(name)
        if home is not None and partition != home:
            # the control topic is co-partitioned with the inputs: a control record off the
            # source's home partition (another client's partitioner) must not start the source
            # here, or a worker that does not own its home would become a second owner,
            # releasing the same periods with noise of its own (audit of 2026-11-28)
            self._emit_unrouted(misplaced(record, source), outcome)
            return
        keyed = record.key == self._source_keys[name] or topic in self._unkeyed_topics
        slot = self.slots.get(name) or self._load(name, partition, outcome, create=keyed)
        if not keyed or slot is None or partition != slot.home:
            self._emit_unrouted(misplaced(record, source), outcome)
            return
        self._touch(name, slot, touched, now)
        result = slot.engine.control(
            value, decoded=decoded, topic=topic, partition=partition, offset=record.offset
        )
        if result.skipped:
            outcome.skipped += 1

    def assign(self, partitions: Iterable[int]) -> BatchOutcome:
        """Load (or start) every source whose home partition is among ``partitions`` (just
        assigned to this worker), so that its periods close on schedule even if no record
        ever arrives; checkpoints the sources it starts and re-publishes pending outboxes."""
        outcome = BatchOutcome()
        mine = set(partitions)
        for name, home in sorted(self._homes.items()):
            if home in mine and name not in self.slots:
                slot = self._load(name, home, outcome)
                if slot is not None and self.state.get(hot_key(name)) is None:
                    write_checkpoint(name, slot, slot.engine.take_changes(), self.topics, outcome)
        return outcome

    def tick(self, at: float | None = None, *, stamp: float | None = None) -> BatchOutcome:
        """Close, in every loaded source, the periods due at public instant ``at`` (default:
        the clock's reading now), ``pace`` per stream at most, and checkpoint what changed.

        ``at`` is the instant the caller's timer scheduled this tick for, not the moment it
        ran: what closes depends on the clock alone, even when the tick runs late behind a
        batch. ``stamp``: the wall-clock instant (Unix seconds) the releases are published
        as (their Kafka timestamp and ``streamdp_last_release_timestamp_seconds``); default
        ``at`` (the wall clock is the public clock)."""
        outcome = BatchOutcome()
        reading = self.clock() if at is None else at
        outcome.released_at = reading if stamp is None else stamp
        for name, slot in self.slots.items():
            engine = slot.engine
            engine.observe_clock(reading)
            if engine.close_due(reading):
                write_checkpoint(name, slot, engine.take_changes(), self.topics, outcome)
        return outcome

    def due(self, at: float | None = None) -> bool:
        """True when a loaded source has a period to close at public instant ``at`` (default:
        each engine's last clock reading)."""
        return any(slot.engine.due(at) for slot in self.slots.values())

    def backlogs(self, at: float) -> dict[str, tuple[int, int]]:
        """Per stream of the loaded sources with periods due at public instant ``at``:
        ``(periods due and not closed, horizon)``."""
        out = {}
        for slot in self.slots.values():
            for name, runtime in slot.engine.streams.items():
                waiting = runtime.backlog(at)
                if waiting:
                    out[name] = (waiting, runtime.horizon)
        return out

    def next_close(self) -> float:
        """The earliest public instant at which a loaded source has a period to close (-inf: an
        operator's close is waiting; inf: nothing will ever close)."""
        return min((slot.engine.next_close() for slot in self.slots.values()), default=float("inf"))

    # ------------------------------------------------------------------ routing helpers
    def _emit_unrouted(self, letter: DeadLetterRecord, outcome: BatchOutcome) -> None:
        # refused before touching any source state: publish directly (the record's offset is
        # acknowledged only after this publication is, so nothing is lost)
        outcome.publications.append(
            Publication(self.topics.dead_letter, letter.key, letter.to_json())
        )
        outcome.dead_letters.append(letter)

    # ------------------------------------------------------------------ views
    def engines(self) -> dict[str, Engine]:
        """Loaded engines by source (read-only use: status and metrics)."""
        return {name: slot.engine for name, slot in self.slots.items()}
