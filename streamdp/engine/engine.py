"""The release engine: a plain object (no Kafka) that a Faust agent, a file replay and the
tests all drive the same way (DESIGN §2, §5).

    engine = Engine(spec, sampler=production_sampler(), ledger_backend=JsonLinesLedgerBackend(p))
    publish(engine.advance_clock(now))          # the public clock: closes due periods
    engine.observe_clock(now)                   # (the daemon: a batch's arrival reading only;
    publish(engine.close_due(at))               #  its tick closes what is due at instant at)
    result = engine.ingest(raw_bytes, source_topic="orders", partition=0, offset=42)
    publish(result.dead_letters)
    publish(engine.control(raw_control_bytes))  # operator actions (the control topic only)
    state = engine.snapshot();  Engine(spec, sampler=...).restore(state)

The release schedule is public: a period closes when the public clock (the worker's, never an
event's time) passes its end plus the allowed lateness, or when an operator's close control
record says so. Whether an event counts depends on that event alone and on the clock reading
it is judged at (:meth:`advance_clock` or :meth:`observe_clock` sets it for the records
ingested after it; the worker judges each record at its own Kafka timestamp with
:meth:`judge_arrival_at`): never on any other event. Duplicates are true duplicates only (the
same bytes in the same period: a producer retry); a record reusing another's event id counts on
its own.

Every output record has ``.key`` and ``.to_json()`` (see :mod:`streamdp.engine.records`).
Raw counts live only in the streams' protected state (and in :meth:`Engine.snapshot`); no
release, dead letter, exception message or statistic carries them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.engine.changes import ChangeSet, ChangeTracker, Spend
from streamdp.engine.control import close_request
from streamdp.engine.events import RejectedError, decode
from streamdp.engine.intake import RecordIntake
from streamdp.engine.ledger import BudgetLedger, LedgerBackend
from streamdp.engine.persistence import EnginePersistence
from streamdp.engine.records import ConsistentRecord, ReleaseRecord
from streamdp.engine.results import (
    NEVER,
    EngineStats,
    IngestResult,
    OutputRecord,
    RawRecord,
)
from streamdp.engine.scanned_orders import scanned_sources
from streamdp.engine.spec import EngineSpec, SourceSpec
from streamdp.engine.stream import StreamRuntime
from streamdp.noise.sampler import NoiseSampler


class Engine(RecordIntake, EnginePersistence):
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
    ``native_scan``: offer records of :meth:`consume` to the native order scanner first, when
    it is built (:mod:`streamdp.engine.scanned_orders`); off, every record takes the Python
    path. The results are the same either way; only the speed differs.
    ``unit_key``: the secret key privacy-unit identifiers are hashed under (at least 16
    bytes; required when a stream declares a privacy unit, and the same on every restore).
    ``stores_nodes``: the caller stores every noisy node :meth:`take_changes` hands out (the
    daemon), so a past epoch's nodes are dropped only once handed out and no revision reads
    them; off (a file replay, which stores none), they are dropped as soon as no revision
    reads them. Either way releases and revisions are the same.
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
        native_scan: bool = True,
        unit_key: bytes | None = None,
        stores_nodes: bool = True,
    ) -> None:
        self.spec = spec
        self._fingerprint = spec.fingerprint()  # a hash of the whole spec: once, not per snapshot
        self.sampler = sampler
        self.batch = batch
        if pace is not None and pace < 1:
            raise ValueError(f"pace must be >= 1 period per step, got {pace}")
        self.pace = pace
        self.ledger = BudgetLedger(
            {name: s.cap for name, s in spec.sources.items()},
            ledger_backend,
            units={name: _unit(s) for name, s in spec.sources.items()},
        )
        self.streams: dict[str, StreamRuntime] = {
            name: StreamRuntime(s, sampler, self._spend, unit_key, stored_by_caller=stores_nodes)
            for name, s in spec.streams.items()
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
        # input topics whose records the native scanner reads first (none when it is not built
        # or native_scan is off; the results are the same either way)
        self._scanned = (
            scanned_sources(list(spec.sources.values()), self._by_source) if native_scan else {}
        )
        # the public clock's latest reading: records ingested now arrived at this instant
        self.now: float = NEVER
        self._offsets: dict[tuple[str, int], int] = {}
        self.stats = EngineStats()
        self._revisions_seen: dict[str, int] = {}  # per stream, the last revision counted
        self._recording = record_outputs
        self._changes = ChangeTracker(record_outputs=record_outputs)
        self._drops_taken: dict[str, int] = {}  # unit drops already handed out, per stream

    # ------------------------------------------------------------------ budget
    def _spend(self, source: str, stream: str, epoch: int, epsilon: Decimal) -> object:
        recorded = self.ledger.record_epoch(source, stream, epoch, epsilon)
        if recorded and self._recording:
            self._changes.spend(Spend(source, stream, epoch, epsilon))
        return recorded

    def epsilon_spent(self) -> dict[str, Decimal]:
        """Event-level epsilon (rho for a zCDP source) spent per source, from the durable
        ledger."""
        return {name: self.ledger.spent(name) for name in self.spec.sources}

    # ------------------------------------------------------------------ control
    def control(
        self,
        record: RawRecord,
        *,
        decoded: dict[str, Any] | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> IngestResult:
        """An operator's control record (from the control topic; never from input).

        The one action is ``close``: ``{"type": "control", "action": "close", "stream": S,
        "through": T}`` makes every period of ``S`` ending at or before ``T`` due without
        waiting for its allowed lateness. ``T`` may not be after the clock's reading (the
        future cannot be released), so a close is bounded by the clock. Nothing closes here:
        the periods it makes due close at the next :meth:`close_due` (the daemon's tick),
        ``pace`` at a time, so no record on any topic sets the moment of a release. Operators
        must never derive ``T`` from the data (e.g. "close when the orders stop"): that would
        make the schedule depend on events.
        Refused records come back as dead letters (``bad_control``, ``unknown_stream``).
        ``decoded``: ``record`` as :func:`~streamdp.engine.events.decode` already read it (a
        caller that routed it), so it is not parsed twice.
        """
        if self._redelivered(topic, partition, offset):
            return IngestResult(skipped=True)
        try:
            event = decoded if decoded is not None else decode(record)
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
        stream, through = close_request(event, self.streams, self.now)
        self.streams[stream].request_close(through)
        return []

    # ------------------------------------------------------------------ time
    def observe_clock(self, now: float) -> None:
        """Move the public clock's reading to ``now`` (it never moves back): records ingested
        after this call arrived at that reading. Closes nothing (see :meth:`close_due`): a
        record that arrives after its period's close instant is late whether or not the period
        has closed yet, so a record can neither close a period nor find one open by luck."""
        self.now = max(self.now, now)
        self.judge_arrival_at(self.now)

    def judge_arrival_at(self, instant: float) -> None:
        """Records ingested after this call are judged as sent at public instant ``instant``
        (their own Kafka timestamp on the public clock) instead of at the clock's reading:
        late when ``instant`` is after their period's close instant, too far ahead against
        it. Moves no clock and closes nothing; :meth:`observe_clock` returns to the reading.
        A period already closed refuses its records whatever their instant."""
        batch = self.batch
        for runtime in self.streams.values():
            runtime.set_arrival(instant, batch=batch)

    def close_due(self, at: float | None = None) -> list[OutputRecord]:
        """Close every period whose close instant (end plus allowed lateness) is at or before
        ``at`` (default, and at most: the clock's reading), and every period an operator's
        close asked for; each stream closes at most ``pace`` periods per call, oldest first (the
        rest stay due). ``at`` is the public instant of the release: the daemon's tick passes
        its scheduled instant, so what closes depends on the clock alone. O(streams) when
        nothing closes."""
        instant = self.now if at is None else min(at, self.now)
        out: list[OutputRecord] = []
        for runtime in self.streams.values():
            if runtime.next_deadline <= instant:
                out.extend(self._count(runtime.close_due(instant, self.pace)))
        return out

    def advance_clock(self, now: float) -> list[OutputRecord]:
        """:meth:`observe_clock` then :meth:`close_due` at ``now`` (the file replay's and the
        tests' one step; the daemon observes the clock per batch and closes only on its tick)."""
        self.observe_clock(now)
        return self.close_due(now)

    def next_close(self) -> float:
        """The earliest public instant at which some stream has a period to close (-inf: one
        is due now, an operator's close; inf: none ever, every stream finished)."""
        return min((r.next_deadline for r in self.streams.values()), default=float("inf"))

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

    def periods_closed(self) -> int:
        """How many periods the engine's streams have closed, summed over them (it only grows:
        the worker's witness of its closes, :mod:`streamdp.daemon.close_witness`)."""
        return sum(runtime.closed for runtime in self.streams.values())

    def due(self, at: float | None = None) -> bool:
        """True when some stream has a period to close at ``at`` (default: the clock's
        reading)."""
        instant = self.now if at is None else at
        return any(r.next_deadline <= instant for r in self.streams.values())

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
    def take_changes(self) -> ChangeSet:
        """Everything that changed since the last call (or :meth:`restore`), marked taken: the
        hot state, the noisy nodes, k-ary epoch noise and event ids drawn or counted since,
        the periods closed, and (with ``record_outputs``) the outputs and ledger spends made
        (see :class:`~streamdp.engine.changes.ChangeSet`). O(what changed), whatever the
        history. A caller must store the change set before it publishes anything in it."""
        dropped = self.stats.dropped_over_unit_bound
        drops = {s: n - self._drops_taken.get(s, 0) for s, n in dropped.items()}
        self._drops_taken = dict(dropped)
        return self._changes.take(
            self.streams,
            lambda: self.snapshot(with_seen=False, with_noise=False, with_nodes=False),
            {s: n for s, n in drops.items() if n},
        )

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

    def current_epochs(self) -> dict[str, int]:
        """Per stream, the epoch its counter is in (0 until its first horizon is released)."""
        return {name: runtime.counter.epoch for name, runtime in self.streams.items()}

    def adopt_stored_noise(self, stream: str, epoch: int, node_noise: list[list[int]]) -> bool:
        """Epoch noise of ``stream`` stored before a crash lost the state that refers to it:
        used instead of drawing (see :meth:`StreamRuntime.adopt_stored_noise`). False when it
        is not a whole epoch's noise for this stream (ignored)."""
        runtime = self.streams.get(stream)
        adopted = runtime is not None and runtime.adopt_stored_noise(epoch, node_noise)
        if adopted:
            self._changes.adopted_noise(stream, epoch)
        return adopted

    def hand_out_again(
        self,
        *,
        ids_of: Iterable[str] = (),
        noise_of: Iterable[str] = (),
        units_of: Iterable[str] = (),
    ) -> None:
        """After :meth:`restore` from a layout that kept the open periods' event ids (epoch
        noise, privacy-unit admission logs) of streams ``ids_of`` (``noise_of``, ``units_of``)
        inside the hot state: the next :meth:`take_changes` hands them out whole, so that they
        get stored on their own."""
        self._changes.hand_out_again(ids_of=ids_of, noise_of=noise_of, units_of=units_of)


def _unit(source: SourceSpec) -> str:
    """The ledger unit of ``source``'s budget: rho for zCDP, epsilon for pure DP."""
    return "rho" if source.definition == "zcdp" else "epsilon"
