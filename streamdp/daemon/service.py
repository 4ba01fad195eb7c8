"""The daemon's release service: the engine driven batch by batch, with no Kafka in it.

The Faust agent hands :meth:`ReleaseService.process` a batch of input records (topic,
partition, offset, key, value). The service routes each record to the engine of its source
(one :class:`~streamdp.engine.Engine` per source, so a source's state moves between workers as
one unit), and returns a :class:`BatchOutcome`:

1. ``writes``: table entries (hot state, new noisy nodes, a k-ary epoch's noise, outbox records)
   the adapter must make durable (changelog delivery acknowledged) FIRST;
2. ``publications``: output records to send, only after step 1;
3. ``cleanup``: outbox deletions to write once the publications are acknowledged.

Only then may the adapter acknowledge the input records (so their offsets get committed).
A crash anywhere in between is safe: input re-delivered after the last durable checkpoint is
skipped by the engine's applied offsets (stored in the checkpoint), and a pending outbox is
published again when the source is next loaded (same keys, same values). Noise is drawn in
memory and published only after it is stored; noise lost in a crash was never published, and
a node stored by a checkpoint that never completed is reused when its period closes again, so
no stored node is drawn twice.

Records of one source must all arrive on one partition, its *home*: the partition the default
(murmur2) partitioner maps the source name to (or the only partition). A record on any other
partition, or keyed otherwise, goes to the dead-letter topic as ``wrong_partition_key`` before
touching any state, so two workers can never each count part of a source.

Time is the public clock the service is given (the worker's wall clock in production): every
batch first advances each source it touches to the clock's reading, and :meth:`tick` does so
for every source this worker owns, so periods close on schedule whether or not records arrive.
Records of a batch arrived at that reading. Control records come only from the control topic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.partitioner import murmur2

from streamdp.daemon.checkpoint import (
    NodeKey,
    counted_nodes,
    hot_key,
    join_snapshot,
    node_key,
    noise_chunks,
    noise_key,
    outbox_key,
    outbox_prefix,
    parse_node_key,
    parse_noise_key,
    parse_seen_key,
    seen_key,
)
from streamdp.engine import ConsistentRecord, DeadLetterRecord, Engine, EngineSpec, ReleaseRecord
from streamdp.engine.changes import ChangeSet
from streamdp.engine.engine import ACCEPTED, SKIPPED, raw_text
from streamdp.engine.events import Reason
from streamdp.engine.ledger import MemoryLedgerBackend
from streamdp.engine.spec import SourceSpec
from streamdp.errors import InputGapError, StateError
from streamdp.noise.sampler import NoiseSampler

DAEMON_STATE_KEY = "daemon"
OutputRecord = ReleaseRecord | ConsistentRecord | DeadLetterRecord
#: Most periods one stream closes per batch or tick (a clock jump is worked off in steps).
CLOSE_PACE = 32
#: Most content keys in one stored chunk (33-34 bytes each in JSON: ~560 KB, under Kafka's
#: default 1 MB message limit whatever the event ids look like).
SEEN_CHUNK_KEYS = 16_384
#: The encoded size bound of one content-key chunk: a JSON list of 32-character hex strings
#: (each at most 36 bytes with its quotes and a ", " separator).
MAX_SEEN_CHUNK_BYTES = SEEN_CHUNK_KEYS * len('"0123456789abcdef0123456789abcdef", ') + 2


def home_partition(source: str, partitions: int) -> int:
    """The partition Kafka's default partitioner sends records keyed ``source`` to."""
    hashed: int = murmur2(source.encode("utf-8"))
    return (hashed & 0x7FFFFFFF) % partitions


#: the :class:`OutputTopics` field of each record kind (looked up per output record)
_TOPIC_OF_KIND = {"release": "releases", "consistent": "consistent", "dead_letter": "dead_letter"}


@dataclass(frozen=True)
class OutputTopics:
    """Names of the topics the daemon writes."""

    releases: str = "streamdp.releases"
    consistent: str = "streamdp.consistent"
    dead_letter: str = "streamdp.dead-letter"
    control: str = "streamdp.control"

    @classmethod
    def in_namespace(cls, namespace: str) -> OutputTopics:
        """``<namespace>.releases``, ``.consistent``, ``.dead-letter``, ``.control``."""
        return cls(
            f"{namespace}.releases",
            f"{namespace}.consistent",
            f"{namespace}.dead-letter",
            f"{namespace}.control",
        )

    def for_record(self, record: OutputRecord) -> str:
        """The topic of a record, by its kind (the same routing every sink uses)."""
        return str(getattr(self, _TOPIC_OF_KIND[record.kind]))


class InputLike(Protocol):
    """What the service reads of an input record: aiokafka's ``ConsumerRecord``, Faust's
    ``Message`` and :class:`InputRecord` all have it (a None value is read as empty)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


# one partition's records, in offset order
Run = Sequence[InputLike]


def runs_of(records: Iterable[InputLike]) -> list[Run]:
    """``records`` cut into runs of consecutive records of the same (topic, partition)."""
    runs: list[Run] = []
    current: list[InputLike] = []
    position: tuple[str, int] | None = None
    for record in records:
        here = (record.topic, record.partition)
        if here != position:
            current = []
            runs.append(current)
            position = here
        current.append(record)
    return runs


@dataclass(frozen=True)
class InputRecord:
    """One record as read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class StateWrite:
    """Set (``value`` not None) or delete one key of the state table, on ``partition``."""

    partition: int
    key: str
    value: Any | None


@dataclass(frozen=True)
class Publication:
    """One output record to send: ``topic``, ``key`` and JSON ``value`` (UTF-8 text)."""

    topic: str
    key: str
    value: str


@dataclass
class BatchOutcome:
    """What a batch produced; see the module docstring for the order the adapter must follow."""

    writes: list[StateWrite] = field(default_factory=list)
    publications: list[Publication] = field(default_factory=list)
    cleanup: list[StateWrite] = field(default_factory=list)
    releases: list[ReleaseRecord] = field(default_factory=list)
    revisions: list[ConsistentRecord] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    skipped: int = 0
    accepted: int = 0


def source_spec(spec: EngineSpec, source: str) -> EngineSpec:
    """The configuration restricted to one source and the streams reading it."""
    streams = {n: s for n, s in spec.streams.items() if s.source == source}
    # the snapshot fingerprint covers only this source and its streams: editing another
    # source's part of the configuration must not make this source's state unrestorable
    raw_sources = dict(spec.raw.get("sources", {}))
    raw_streams = dict(spec.raw.get("streams", {}))
    return EngineSpec(
        sources={source: spec.sources[source]},
        streams=streams,
        raw={
            "source": {source: raw_sources.get(source)},
            "streams": {n: raw_streams.get(n) for n in streams},
        },
    )


class _SourceSlot:
    """A loaded source: its engine and what of its state is already stored."""

    def __init__(self, engine: Engine, home: int) -> None:
        self.engine = engine
        self.home = home
        # (stream, epoch) -> chunks of the k-ary epoch noise already stored
        self.stored_noise: dict[tuple[str, int], int] = {}
        self.next_outbox = 0
        # per (stream, open period): how many chunks of its content keys are stored
        self.seen_chunks: dict[tuple[str, int], int] = {}
        # chunks found in the table at load beyond those the hot state counts (left by a
        # checkpoint that never completed): deleted with the period's own chunks
        self.seen_present: dict[tuple[str, int], int] = {}


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
        clock: Callable[[], float] = time.time,
        pace: int = CLOSE_PACE,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.pace = pace
        self.sampler = sampler
        self.state = state
        self.topics = topics or OutputTopics()
        self.topic_partitions = dict(topic_partitions or {})
        self.allow_gaps = allow_gaps
        self.slots: dict[str, _SourceSlot] = {}
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
    ) -> _SourceSlot | None:
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
        )
        slot = _SourceSlot(engine, home)
        keys = [str(k) for k in list(self.state.keys())]
        counted: dict[str, dict[int, int]] = {}
        if hot is not None:
            hot = dict(hot)
            daemon = dict(hot.pop(DAEMON_STATE_KEY))
            slot.home = int(daemon["home"])
            slot.next_outbox = int(daemon["next_outbox"])

            def node(stream: str, epoch: int, t: int) -> list[int] | None:
                value = self.state.get(node_key(source, stream, epoch, t))
                return None if value is None else list(value)

            slot.stored_noise = {
                (str(stream), int(epoch)): int(n)
                for stream, epoch, n in daemon.get("noise_chunks", [])
            }

            def noise(stream: str, epoch: int) -> list[list[int]] | None:
                n = slot.stored_noise.get((stream, epoch))
                return None if n is None else self._noise_rows(source, stream, epoch, n)

            snapshot = join_snapshot(hot, node, noise)
            for key in keys:
                parsed = parse_seen_key(source, key)
                if parsed is not None:
                    stream, period, chunk = parsed
                    seen = (stream, period)
                    slot.seen_present[seen] = max(slot.seen_present.get(seen, 0), chunk + 1)
            inline_ids = self._restore_seen(source, slot, snapshot, daemon.get("seen_chunks", []))
            inline_noise = [
                name
                for name, state in hot["streams"].items()
                if dict(state).get("counter", {}).get("node_noise") is not None
            ]
            engine.restore(snapshot)  # what it restores counts as stored (never taken)
            engine.hand_out_again(ids_of=inline_ids, noise_of=inline_noise)
            counted = counted_nodes(hot)
            # re-publish whatever a crash left in the outbox (same key, same value)
            prefix = outbox_prefix(source)
            for key in sorted(k for k in keys if k.startswith(prefix)):
                pending = self.state.get(key)
                if pending is None:
                    continue
                outcome.publications.append(
                    Publication(pending["topic"], pending["key"], pending["value"])
                )
                outcome.cleanup.append(StateWrite(slot.home, key, None))
        # noisy nodes a crash left stored but unreferenced (it came after the node writes,
        # before the hot state): their periods are closed again with the stored values, so no
        # node is ever drawn twice
        unreferenced: dict[NodeKey, list[int]] = {}
        for key in keys:
            parsed = parse_node_key(source, key)
            if parsed is None:
                continue
            stream, epoch, t = parsed
            if t > counted.get(stream, {}).get(epoch, 0):
                value = self.state.get(key)
                if value is not None:
                    unreferenced[parsed] = list(value)
        if unreferenced:
            engine.adopt_stored_nodes(unreferenced)  # never handed out to be written again
        # k-ary epoch noise stored for an epoch the restored state has not drawn (a crash came
        # after it was written, before the state that refers to it, or it was adopted so
        # before): an outbox record published on reload may have used it, so the epoch uses it
        # instead of drawing. Chunks a crash cut short never preceded a stored outbox record
        # (writes are made durable in order), so no release used them: that epoch's noise is
        # drawn afresh and its chunks written again. Past epochs' chunks are not read.
        held = {(name, epoch) for name, (epoch, _) in engine.epoch_noise().items()}
        current = {name: runtime.counter.epoch for name, runtime in engine.streams.items()}
        found: dict[tuple[str, int], int] = {}
        for key in keys:
            parsed_noise = parse_noise_key(source, key)
            if parsed_noise is None:
                continue
            stream, epoch, chunk = parsed_noise
            if epoch >= current.get(stream, epoch + 1) and (stream, epoch) not in held:
                found[(stream, epoch)] = max(found.get((stream, epoch), 0), chunk + 1)
        for (stream, epoch), n in sorted(found.items()):
            rows = self._noise_rows(source, stream, epoch, n)
            slot.stored_noise.pop((stream, epoch), None)
            if rows is not None and engine.adopt_stored_noise(stream, epoch, rows):
                slot.stored_noise[(stream, epoch)] = n
        self.slots[source] = slot
        return slot

    def _noise_rows(self, source: str, stream: str, epoch: int, n: int) -> list[list[int]] | None:
        """The rows of chunks ``0..n-1`` of a stored epoch noise; None if one is missing."""
        rows: list[list[int]] = []
        for chunk in range(n):
            value = self.state.get(noise_key(source, stream, epoch, chunk))
            if value is None:
                return None
            rows.extend(list(r) for r in value)
        return rows

    def _restore_seen(
        self, source: str, slot: _SourceSlot, snapshot: dict[str, Any], counts: list[Any]
    ) -> list[str]:
        """Put the open periods' event ids, read from their chunks, back into ``snapshot``.
        Returns the streams whose hot state held its ids itself (an older layout)."""
        chunks = {(str(stream), int(period)): int(n) for stream, period, n in counts}
        inline: list[str] = []
        for name, state in snapshot["streams"].items():
            if "seen" in state:
                inline.append(name)  # a checkpoint written before the ids had keys of their own
                continue
            entries: list[list[Any]] = []
            for (stream, period), n in sorted(chunks.items()):
                if stream != name:
                    continue
                ids: set[str] = set()
                for c in range(n):
                    chunk = self.state.get(seen_key(source, stream, period, c))
                    if chunk is None:
                        raise StateError(
                            f"stored event ids of stream {stream!r} period {period} (chunk {c}) "
                            "are missing; refusing to restore (duplicates could be counted)"
                        )
                    ids.update(str(i) for i in chunk)
                entries.append([period, sorted(ids)])
                slot.seen_chunks[(stream, period)] = n
            state["seen"] = entries
        return inline

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

    def process_runs(self, runs: Iterable[Run]) -> BatchOutcome:
        """Ingest a batch given as runs (each one partition's records in offset order);
        returns the checkpoint writes, publications and cleanup to perform.

        A record of an input topic belongs to the topic's source, whose engine keeps the
        applied offsets of that (topic, partition) with no hole: a record refused before
        reaching the engine (wrongly keyed) is marked handled there, so neither the next
        record nor a restart after it looks like input skipped below the worker. Records of the
        control topic are routed by the stream or source they name; their offsets are sparse
        per source, so only duplicates are checked there, not holes.
        """
        outcome = BatchOutcome()
        touched: dict[str, _SourceSlot] = {}
        now = self.clock()
        try:
            for run in runs:
                if not run:
                    continue
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
                "topics whose offsets have legitimate holes, e.g. transactional producers)"
            ) from None
        for name, slot in touched.items():
            self._checkpoint(name, slot, outcome)
        return outcome

    def _run_of_source(
        self,
        owner: SourceSpec,
        run: Run,
        outcome: BatchOutcome,
        touched: dict[str, _SourceSlot],
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
                self._emit_unrouted(self._misplaced(record, owner), outcome)
            return
        slot = self.slots.get(name)
        start = 0
        while slot is None and start < len(run):
            # no state of the source here yet: a correctly keyed record creates it
            record = run[start]
            slot = self._load(name, partition, outcome, create=any_key or record.key == key)
            if slot is None:
                self._emit_unrouted(self._misplaced(record, owner), outcome)
                start += 1
        if slot is None:
            return
        records = run if start == 0 else run[start:]
        if partition != slot.home:
            # the source's state is on another partition: nothing of it may change here
            for record in records:
                self._emit_unrouted(self._misplaced(record, owner), outcome)
            return
        self._touch(name, slot, touched, now)
        engine = slot.engine
        consume = engine.consume
        strict = not self.allow_gaps
        accepted = skipped = 0
        # the engine keeps the batch's outputs for its change set (the checkpoint reads them
        # there); what consume also appends here is not used
        returned: list[OutputRecord] = []
        for record in records:
            offset = record.offset
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
                topic, partition, offset, strict, self._misplaced(record, owner)
            ):
                skipped += 1
        outcome.accepted += accepted
        outcome.skipped += skipped

    @staticmethod
    def _touch(name: str, slot: _SourceSlot, touched: dict[str, _SourceSlot], now: float) -> None:
        """The first time source ``name`` is touched in a batch, its clock is advanced to
        ``now`` (records of the batch arrived then); it is checkpointed after the batch."""
        if name not in touched:
            touched[name] = slot
            slot.engine.advance_clock(now)  # what it closes is in the engine's change set

    def _from_other_topic(
        self, record: InputLike, outcome: BatchOutcome, touched: dict[str, _SourceSlot], now: float
    ) -> None:
        """A record of the control topic (routed to the source it names) or of a topic no
        source reads."""
        value = b"" if record.value is None else record.value
        source = self._source_of_control(value) if record.topic == self.topics.control else None
        if source is None:
            letter = self._dead_letter(
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
        keyed = record.key == self._source_keys[name] or topic in self._unkeyed_topics
        slot = self.slots.get(name) or self._load(name, partition, outcome, create=keyed)
        if not keyed or slot is None or partition != slot.home:
            self._emit_unrouted(self._misplaced(record, source), outcome)
            return
        self._touch(name, slot, touched, now)
        result = slot.engine.control(value, topic=topic, partition=partition, offset=record.offset)
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
                    self._checkpoint(name, slot, outcome)
        return outcome

    def tick(self) -> BatchOutcome:
        """Advance every loaded source to the public clock's reading: closes (and releases)
        every due period, ``pace`` per stream at most; checkpoints what changed."""
        outcome = BatchOutcome()
        now = self.clock()
        for name, slot in self.slots.items():
            if slot.engine.advance_clock(now):
                self._checkpoint(name, slot, outcome)
        return outcome

    def due(self) -> bool:
        """True when a loaded source has a period to close at the clock's last reading."""
        return any(slot.engine.due() for slot in self.slots.values())

    def _checkpoint(self, source: str, slot: _SourceSlot, outcome: BatchOutcome) -> None:
        """Append the writes of ``source``'s checkpoint to ``outcome``: the engine's change set
        laid out in keys (event ids, a k-ary epoch's noise, the nodes drawn since the last
        checkpoint, the outbox) and the hot state, last; O(batch), whatever the history."""
        changes = slot.engine.take_changes()
        seen_counts = self._checkpoint_seen(source, slot, changes, outcome)
        # a k-ary epoch's noise, once, by the checkpoint of the batch that drew it: before the
        # outbox records that used it and the hot state that refers to it
        for drawn in changes.new_noise:
            stream, epoch = drawn.stream, drawn.epoch
            chunks = noise_chunks(drawn.noise)
            for c, rows in enumerate(chunks):
                key = noise_key(source, stream, epoch, c)
                outcome.writes.append(StateWrite(slot.home, key, rows))
            slot.stored_noise = {
                (s, e): n for (s, e), n in slot.stored_noise.items() if s != stream or e > epoch
            }
            slot.stored_noise[(stream, epoch)] = len(chunks)
        for (stream, epoch, t), values in changes.new_nodes.items():
            outcome.writes.append(StateWrite(slot.home, node_key(source, stream, epoch, t), values))
        for record in changes.outputs:
            publication = Publication(self.topics.for_record(record), record.key, record.to_json())
            key = outbox_key(source, slot.next_outbox)
            slot.next_outbox += 1
            outcome.writes.append(
                StateWrite(
                    slot.home,
                    key,
                    {
                        "topic": publication.topic,
                        "key": publication.key,
                        "value": publication.value,
                    },
                )
            )
            outcome.publications.append(publication)
            outcome.cleanup.append(StateWrite(slot.home, key, None))
        outcome.releases += changes.releases
        outcome.revisions += changes.revisions
        outcome.dead_letters += changes.dead_letters
        hot = dict(changes.hot_state)
        hot[DAEMON_STATE_KEY] = {
            "home": slot.home,
            "next_outbox": slot.next_outbox,
            "seen_chunks": seen_counts,
            "noise_chunks": [[s, e, n] for (s, e), n in sorted(slot.stored_noise.items())],
        }
        # the hot state goes last: on recovery it only refers to nodes already written
        outcome.writes.append(StateWrite(slot.home, hot_key(source), hot))

    def _checkpoint_seen(
        self, source: str, slot: _SourceSlot, changes: ChangeSet, outcome: BatchOutcome
    ) -> list[list[Any]]:
        """Write the event ids each open period counted since the last checkpoint as new
        chunks (O(new ids)); schedule the deletion of closed periods' chunks (after the
        checkpoint is stored). Returns ``[stream, period, chunks]`` for every open period."""
        counts: list[list[Any]] = []
        for key in changes.open_periods:
            stream, period = key
            n = slot.seen_chunks.get(key, 0)
            new = changes.new_ids.get(key)
            if new is not None:
                # bounded chunks: a content key is a 32-character digest whatever the record,
                # so no chunk nears the producer's message size limit
                for first in range(0, len(new), SEEN_CHUNK_KEYS):
                    part = list(new[first : first + SEEN_CHUNK_KEYS])
                    outcome.writes.append(
                        StateWrite(slot.home, seen_key(source, stream, period, n), part)
                    )
                    n += 1
                slot.seen_chunks[key] = n
            counts.append([stream, period, n])
        still_open = set(changes.open_periods)
        gone = set(changes.closed_periods)
        for key in slot.seen_present.keys() - still_open:
            closed = changes.periods_closed.get(key[0])
            if closed is None or key[1] < closed:
                gone.add(key)
            # else: left by an incomplete checkpoint for a period not yet open: rewritten
        for key in gone:
            n = max(slot.seen_chunks.pop(key, 0), slot.seen_present.pop(key, 0))
            outcome.cleanup += [
                StateWrite(slot.home, seen_key(source, key[0], key[1], c), None) for c in range(n)
            ]
        return counts

    # ------------------------------------------------------------------ routing helpers
    def _source_of_control(self, value: bytes) -> SourceSpec | None:
        """The source a control-topic record names (by ``stream``, else ``source``), if any."""
        try:
            data = json.loads(value)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        stream = data.get("stream")
        if isinstance(stream, str) and stream in self.spec.streams:
            return self.spec.sources[self.spec.streams[stream].source]
        source = data.get("source")
        if isinstance(source, str):
            if source in self.spec.sources:
                return self.spec.sources[source]
            return self._by_topic.get(source)
        return None

    def _misplaced(self, record: InputLike, source: SourceSpec) -> DeadLetterRecord:
        return self._dead_letter(
            record,
            "wrong_partition_key",
            f"records of source {source.name!r} must be keyed by {source.name!r} with the "
            "default (murmur2) partitioner so that they all land on the partition holding the "
            "source's state (or use single-partition topics)",
            source=source.name,
        )

    def _dead_letter(
        self, record: InputLike, reason: Reason, message: str, *, source: str | None = None
    ) -> DeadLetterRecord:
        raw, encoding = raw_text(record.value if record.value is not None else b"")
        return DeadLetterRecord(
            reason=reason,
            message=message,
            raw=raw,
            raw_encoding=encoding,
            source=source,
            topic=record.topic,
            offset=record.offset,
            event_id=None,
        )

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
