"""How the worker takes its work through the release service and the checkpoint protocol.

Three kinds of work hold ``runtime.lock`` in turn, each going through the service and then the
protocol (:class:`~streamdp.daemon.commit.CheckpointCommit`): input batches (from the batch
queue, the default, or from the Faust agent on ``--input-path stream``), the public clock's
tick (the only step that closes periods, at instants set by the clock alone:
:mod:`streamdp.daemon.tick_schedule`), and the rebalance and shutdown hooks, which first wait
for the batch in flight.

On the batch path the next batch is processed while the previous one goes through the protocol
(``runtime.in_flight``); its own checkpoint starts only when the previous batch is done, so
checkpoints reach the changelog in order. A batch's input records are acknowledged (their
offsets may be committed) only once the protocol returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from faust.exceptions import NotReady, ProducerSendError
from faust.types import TP

from streamdp.daemon.batch_input import BatchQueue, last_offsets
from streamdp.daemon.close_witness import CloseWitnesses
from streamdp.daemon.commit import CheckpointCommit
from streamdp.daemon.fatal import EndWorker, worker_stopping
from streamdp.daemon.observation import InputProgress
from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.routing import Run, runs_of
from streamdp.daemon.runtime import WorkerRuntime
from streamdp.daemon.service import ReleaseService
from streamdp.daemon.tick_schedule import ScheduledTick, first_tick, next_tick
from streamdp.engine.clock import PublicClock
from streamdp.errors import BudgetError, ConfigError, InputGapError, StateError

log = logging.getLogger("streamdp.daemon")
__all__ = ["BatchDriver"]

#: How often the batch task looks again while a rebalance is under way (seconds).
REBALANCE_POLL_SECONDS = 0.05


class BatchDriver:
    """The worker's steps between Faust and the release service (see the module docstring).

    ``new_service`` builds the release service (once, at the first need); ``queue`` is the
    batch input path's queue (None on the stream path); ``source_topics`` are the input topics
    whose partitions are sources' homes.
    """

    def __init__(
        self,
        app: Any,
        runtime: WorkerRuntime,
        *,
        protocol: CheckpointCommit,
        progress: InputProgress,
        end_worker: EndWorker,
        new_service: Callable[[], ReleaseService],
        queue: BatchQueue | None,
        source_topics: Collection[str],
        witnesses: CloseWitnesses | None = None,
    ) -> None:
        self._app = app
        self._runtime = runtime
        self._commit = protocol.commit
        self._progress = progress
        self._end_worker = end_worker
        self._new_service = new_service
        self._queue = queue
        self._source_topics = source_topics
        self._witnesses = witnesses

    def service(self) -> ReleaseService:
        """The worker's release service, built at the first call."""
        runtime = self._runtime
        if runtime.service is None:
            runtime.service = self._new_service()
        return runtime.service

    async def ingest_stream(self, stream: Any) -> None:
        """The Faust agent's body (``--input-path stream``): batches from ``take_events``."""
        settings = self._runtime.settings
        self.service()  # /status is ready before the first record arrives
        async for events in stream.take_events(settings.max_batch, within=settings.batch_seconds):
            runs = runs_of([e.message for e in events])
            try:
                processed = await self._process_and_commit(runs)
            except Exception as error:  # an agent would be restarted: the error would repeat
                self._end_worker(error)
                raise
            # take_events acknowledges the events after this; the input topics take no
            # per-record acknowledgements (faust_setup), their commits take these offsets
            if processed:
                self._acknowledge(last_offsets(runs))

    def _process(
        self, runs: Sequence[Run], readings: Sequence[float] | None = None
    ) -> BatchOutcome:
        """The release service's outcome for a batch (call under ``runtime.lock``), its runs
        received at ``readings`` of the public clock (None: now)."""
        try:
            return self.service().process_runs(runs, readings)
        except (InputGapError, StateError, BudgetError, ConfigError) as error:
            # exit at once: nothing of this batch is durable, and leaving through Faust
            # would acknowledge its records (their offsets could then be committed)
            self._end_worker(error, even_when_stopping=True)
            raise

    async def _process_and_commit(self, runs: Sequence[Run]) -> bool:
        """The checkpoint protocol on one batch, start to end (the stream input path). False,
        and nothing done, during a rebalance (Faust forgot the committed offsets, so a source
        loaded now would be checked against none): the batch stays unacknowledged, and the
        recovery's seek reads it again from the committed offset."""
        runtime = self._runtime
        async with runtime.lock:
            if getattr(self._app, "rebalancing", False):
                return False
            await self.settle()
            await self._commit(self._process(runs))
            runtime.batches += 1
            runtime.records += sum(len(run) for run in runs)
        return True

    async def settle(self) -> None:
        """Wait until the batch in flight is durable, published and acknowledged."""
        runtime = self._runtime
        in_flight, runtime.in_flight = runtime.in_flight, None
        if in_flight is not None:
            await in_flight

    async def _complete(self, outcome: BatchOutcome, runs: Sequence[Run]) -> None:
        """The checkpoint protocol for a processed batch, then its acknowledgement."""
        runtime = self._runtime
        await self._commit(outcome)
        runtime.batches += 1
        ends = last_offsets(runs)
        runtime.records += sum(count for _, count in ends.values())
        self._acknowledge(ends)

    def _acknowledge(self, ends: dict[tuple[str, int], tuple[int, int]]) -> None:
        """The batch whose last offsets and record counts are ``ends`` is durable and
        published: only now may Faust commit its offsets."""
        consumer: Any = self._app.consumer  # faust_internals.acknowledged_commits
        for (topic, partition), (last, count) in ends.items():
            consumer.acknowledge_through(TP(topic, partition), last + 1, count)
        self._progress.observe(ends, consumer.highwater)

    async def ingest_queue(self, batches: BatchQueue) -> None:
        """The batch task's body (the default input path): batches from ``batches``, the queue
        the batching consumer fills (the driver's ``queue``)."""
        app = self._app
        runtime = self._runtime
        self.service()  # /status is ready before the first record arrives
        # Faust's Monitor sensor does per-record bookkeeping nothing here reads (the metrics
        # are streamdp's own); on the batch path it would be a large share of the cost
        with contextlib.suppress(KeyError):
            app.sensors.remove(app.monitor)
        while not worker_stopping(app):
            if not await batches.wait(runtime.settings.batch_seconds):
                if runtime.in_flight is not None and runtime.in_flight.done():
                    await self.settle()  # surfaces its error, if any
                continue
            if getattr(app, "rebalancing", False):
                # Faust forgot the committed offsets at the revocation (a source loaded now
                # would be checked against none): the revocation hook drops the revoked
                # partitions' records, the rest wait for the rebalance to end
                await asyncio.sleep(REBALANCE_POLL_SECONDS)
                continue
            try:
                async with runtime.lock:
                    if runtime.shutting_down:
                        # DEBUG: whether a batch was waiting says whether input was (INFO is
                        # public without --input-volume-metrics; audit of 2026-11-28)
                        log.debug("stopping: last input batch left unacknowledged")
                        return
                    if getattr(app, "rebalancing", False):
                        continue  # (see above; looked at again under the lock)
                    # taken under the lock, so a tick never finds records received before its
                    # instant out of the queue and not yet processed (it processes those first)
                    stamped = batches.take_now()
                    if not stamped:
                        continue  # a tick took them
                    runs = [run for run, _ in stamped]
                    # this batch is processed while the previous one's checkpoint and
                    # publications travel; its own checkpoint is sent only after the
                    # previous one is acknowledged, so checkpoints stay in order
                    outcome = self._process(runs, [stamp for _, stamp in stamped])
                    await self.settle()
                    runtime.in_flight = asyncio.ensure_future(self._complete(outcome, runs))
            except (NotReady, ProducerSendError):
                if not worker_stopping(app):
                    raise
                # the worker is stopping (its producer is closing): leave the batch
                # unacknowledged; the next owner re-reads it from the committed offset
                # and the checkpoint protocol makes that exact
                log.debug("stopping: last input batch left unacknowledged")
                return

    async def finish_in_flight(self) -> None:
        """Before Faust stops the producer: complete the batch in flight, take no other."""
        runtime = self._runtime
        async with runtime.lock:
            runtime.shutting_down = True
            try:
                await self.settle()
            except (NotReady, ProducerSendError) as exc:
                log.debug("stopping: last input batch left unacknowledged (%r)", exc)

    async def revoke(self, revoked: Collection[TP]) -> None:
        """Partitions ``revoked`` left this worker: drop their queued records and sources."""
        runtime = self._runtime
        service = runtime.service
        if service is None:
            return
        async with runtime.lock:
            # the batch in flight is durable before the partitions' next owner reads them
            await self.settle()
            gone = {(tp.topic, tp.partition) for tp in revoked}
            if self._witnesses is not None:  # (a tick may have set them after Faust's revoke)
                self._witnesses.forget(gone)
            dropped = self._release(service, gone)
        if dropped:
            log.info("partitions revoked: released sources %s", ", ".join(sorted(dropped)))

    def _release(self, service: ReleaseService, partitions: set[tuple[str, int]]) -> list[str]:
        """Let ``(topic, partition)``s go (call under ``runtime.lock``): their queued records
        (never acknowledged: the next owner reads them), the sources homed there, their lag
        and their release gauges (the new owner exports them; a frozen copy here would win
        ``max by stream``). Returns the sources dropped."""
        if self._queue is not None:
            self._queue.drop(partitions)
        dropped = service.drop({partition for _, partition in partitions})
        self._progress.revoked(partitions)
        if dropped:
            self._runtime.metrics.forget_releases(
                name for name, stream in service.spec.streams.items() if stream.source in dropped
            )
        return dropped

    async def follow_public_clock(self, clock: PublicClock) -> None:
        """The tick task's body: ticks at the instants :mod:`streamdp.daemon.tick_schedule`
        sets from the public ``clock`` alone (each close instant, a heartbeat every ``--tick``
        seconds, a fixed catch-up pace after downtime), never at an input batch's."""
        app = self._app
        step = self._runtime.settings.tick_seconds
        allowance = self._runtime.settings.delivery_allowance_seconds
        tick = first_tick(clock, step, time.time(), allowance)
        while not worker_stopping(app):
            delay = tick.wall - time.time()
            if delay > 0:
                await asyncio.sleep(min(delay, step))
                continue  # (re-read the wall clock: a sleep may end early)
            try:
                await self.tick(tick)
            except (NotReady, ProducerSendError):
                if not worker_stopping(app):
                    raise
                return  # the producer is closing: the next owner closes what is due
            service = self._runtime.service
            tick = next_tick(
                clock,
                step,
                tick,
                behind=service is not None and service.due(tick.reading),
                next_close=math.inf if service is None else service.next_close(),
                allowance=allowance,
            )

    async def _process_received_before(self, reading: float) -> None:
        """Before a tick closes anything: every queued record received before its instant
        (``reading``) is processed first (call under ``runtime.lock``), so a record received
        before a release is judged (at its own timestamp) before it, however long the records
        in front of it took."""
        queue = self._queue
        if queue is None:
            return
        while stamped := queue.take_now(received_before=reading):
            runs = [run for run, _ in stamped]
            outcome = self._process(runs, [stamp for _, stamp in stamped])
            await self._complete(outcome, runs)

    def _warn_of_backlogs(self, service: ReleaseService, tick: ScheduledTick) -> None:
        """Once per stream: say so when more than a whole epoch of periods is due at once
        (a spec whose start lies far in the past, on the wall clock: every period since
        then is released, epoch after epoch, each spending the stream's epsilon)."""
        warned = self._runtime.backlog_warned
        for stream, (waiting, horizon) in service.backlogs(tick.reading).items():
            if waiting > horizon and stream not in warned:
                warned.add(stream)
                step = self._runtime.settings.tick_seconds
                log.warning(
                    "stream %s: %d periods are due at once (%d epochs of %d): releasing them "
                    "%d per tick (one tick per %.1f s), each epoch spending the stream's epsilon "
                    "again; if the spec's start is not what you meant, stop the worker and set "
                    "it (docs/operating.md, 'Trying it live')",
                    stream,
                    waiting,
                    -(-waiting // horizon),
                    horizon,
                    service.pace,
                    step,
                )

    async def tick(self, tick: ScheduledTick) -> None:
        """One tick: every owned source follows the public clock to ``tick.reading`` (periods
        close on schedule whether or not records arrive), its releases stamped ``tick.wall``.
        Sources whose home partition was assigned are started here, once the state table is
        restored (never from a partly restored table)."""
        app = self._app
        runtime = self._runtime
        service = runtime.service
        if service is None or not runtime.ready or getattr(app, "rebalancing", False):
            return  # what falls due meanwhile closes at a later tick (the schedule catches up)
        async with runtime.lock:
            if runtime.shutting_down:
                return
            await self.settle()
            if getattr(app, "rebalancing", False) or not runtime.ready:
                # a rebalance began while this tick waited for the lock or settled: Faust has
                # forgotten the revoked partitions' committed offsets and learns the new ones
                # only at its recovery's seek, so a source loaded now would be checked
                # against none (streamdp.daemon.resume_check); the next tick after it loads it
                return
            homes = {
                tp.partition for tp in app.consumer.assignment() if tp.topic in self._source_topics
            }
            # a source whose home partition left the assignment without the revocation hook
            # having run yet closes nothing here: its next owner does (no second draw)
            orphaned = {slot.home for slot in service.slots.values()} - homes
            if orphaned:
                gone = {(topic, p) for topic in self._source_topics for p in orphaned}
                dropped = self._release(service, gone)
                log.warning("home partitions left the assignment: released sources %s", dropped)
            outcome = service.assign(homes)
            if outcome.writes or outcome.publications:
                await self._commit(outcome)
            await self._process_received_before(tick.received)
            # one paced step (32 periods per stream at most): after downtime the backlog of
            # due periods is worked off over the following ticks, one per --tick seconds
            if service.due(tick.reading):  # (a backlog is due: nothing to look at otherwise)
                self._warn_of_backlogs(service, tick)
            outcome = service.tick(tick.reading, stamp=tick.wall)
            if outcome.writes or outcome.publications:
                await self._commit(outcome)
            # every loaded source's closes are durable now (loaded from the table, or closed
            # by a tick whose checkpoint was awaited): they become its home partition's
            # witness, written with the partition's next commit (streamdp.daemon.close_witness;
            # a new owner writes it at its first tick)
            if self._witnesses is not None:
                consumer: Any = self._app.consumer  # faust_internals.acknowledged_commits
                for topic, partition in self._witnesses.note(service.closes_by_partition()):
                    consumer.witness_closes(TP(topic, partition))
