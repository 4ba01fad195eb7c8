"""The Faust adapter: the worker's agent or batch task, its timers and its rebalance hooks.

Thin on purpose: all decisions are in :class:`~streamdp.daemon.service.ReleaseService`. The
agent (``--input-path stream``) or the batch task (the default) takes batches of input records
and, for each batch, follows the checkpoint protocol (:class:`~streamdp.daemon.commit.
CheckpointCommit`: checkpoint, publish, clear the outbox), after which Faust acknowledges the
batch's input records (their offsets get committed).

On the batch input path the next batch is processed while the previous one goes through the
protocol; its own checkpoint starts only when the previous batch is done, so checkpoints reach
the changelog in order. A revocation or a shutdown waits for the batch in flight.

The table's keys are source names (plus node/outbox keys); its changelog partition is the
partition of the source's input records, so it is co-partitioned with the input topics and moves
with them on a rebalance.

``create_app`` wires the parts, each in its module: the Faust app and its topics
(``faust_setup``), ending the worker on a fatal error (``fatal``), the checkpoint protocol
(``commit``), metrics of outcomes and input (``observation``), the input-stall watchdog
(``watchdog``), the HTTP pages (``pages``) and the worker's runtime (``runtime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import faust
from faust.exceptions import NotReady, ProducerSendError
from faust.types import TP

from streamdp import __version__
from streamdp.daemon.batch_input import BatchQueue, InputStallWatch, last_offsets
from streamdp.daemon.commit import CheckpointCommit
from streamdp.daemon.fatal import exit_on_crash, worker_ender, worker_stopping
from streamdp.daemon.faust_setup import declare_topics, new_faust_app
from streamdp.daemon.log_safety import hold_value_loggers
from streamdp.daemon.observation import InputProgress, OutcomeObserver
from streamdp.daemon.pages import serve_pages
from streamdp.daemon.runtime import WorkerRuntime, sampler_for
from streamdp.daemon.service import BatchOutcome, ReleaseService, Run, runs_of
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import STATE_TABLE
from streamdp.daemon.watchdog import StallWatchdog, watchdog_interval
from streamdp.engine import load_spec
from streamdp.engine.clock import parse_clock
from streamdp.engine.periods import PeriodClock
from streamdp.engine.stream import check_releasable
from streamdp.errors import BudgetError, ConfigError, InputGapError, StateError
from streamdp.faust_internals import batching_consumer, tuned_fetching
from streamdp.metrics import StreamdpMetrics

log = logging.getLogger("streamdp.daemon")
__all__ = ["create_app"]


def create_app(settings: DaemonSettings) -> tuple[faust.App, WorkerRuntime]:
    """Build the Faust app of one worker (does not start it)."""
    settings.validate()
    hold_value_loggers()
    spec = load_spec(settings.config)
    for stream_spec in spec.streams.values():
        check_releasable(stream_spec)  # refused at start, not when its first record arrives
    metrics = StreamdpMetrics(input_volume=settings.metrics_input_volume)
    runtime = WorkerRuntime(settings, spec, sampler_for(settings), metrics)
    metrics.record_build(__version__, runtime.sampler.name, secure=bool(runtime.sampler.secure))
    public_clock = parse_clock(settings.clock)
    if public_clock.describe() != "wall":
        log.warning("public clock: %s (not the wall clock)", public_clock.describe())
    metrics.bind_ledger(runtime.budget_view)
    for name, stream_spec in spec.streams.items():
        clock = PeriodClock(stream_spec.period)
        start, end = clock.bounds(0)
        metrics.configure_stream(
            name,
            horizon_periods=stream_spec.horizon,
            allowed_lateness_seconds=stream_spec.allowed_lateness_seconds,
            period_seconds=end - start,
        )

    app = new_faust_app(settings)
    source_topics = {s.topic for s in spec.sources.values()}
    input_names = [s.topic for s in spec.sources.values()] + [settings.topics.control]
    changelog_topic = f"{settings.app_id}-{STATE_TABLE}-changelog"
    queue: BatchQueue | None = None
    consumer_class = tuned_fetching(
        app.transport.Consumer, fetch_wait_seconds=settings.fetch_wait_seconds
    )
    if settings.input_path == "batch":
        queue = BatchQueue(input_names, settings.max_batch)
        consumer_class = batching_consumer(consumer_class, queue)
    app.transport.Consumer = consumer_class  # type: ignore[misc]
    topics = declare_topics(app, settings, input_names)
    state = topics.state

    def recovered() -> bool:
        recovery = getattr(app.tables, "recovery", None)
        return recovery is not None and bool(recovery.completed.is_set())

    runtime.recovered = recovered
    end_worker = worker_ender(app, runtime)
    exit_on_crash(app, end_worker)
    progress = InputProgress(metrics, InputStallWatch(settings.stall_exit_seconds))
    protocol = CheckpointCommit(
        state, topics.outputs, OutcomeObserver(metrics, spec, lambda: runtime.service)
    )
    commit = protocol.commit

    def ensure_service() -> ReleaseService:
        if runtime.service is None:
            runtime.service = ReleaseService(
                spec,
                sampler=runtime.sampler,
                state=state.data,
                topics=settings.topics,
                topic_partitions=dict.fromkeys(input_names, settings.partitions),
                allow_gaps=settings.allow_input_gaps,
                clock=public_clock.now,
            )
        return runtime.service

    @app.agent(topics.inputs, name="streamdp-ingest")
    async def ingest(stream: Any) -> None:
        ensure_service()  # /status is ready before the first record arrives
        async for events in stream.take_events(settings.max_batch, within=settings.batch_seconds):
            runs = runs_of([e.message for e in events])
            try:
                await process_and_commit(runs)
            except Exception as error:  # an agent would be restarted: the error would repeat
                end_worker(error)
                raise
            observe_input(last_offsets(runs))

    def process(runs: Sequence[Run]) -> BatchOutcome:
        """The release service's outcome for a batch (call under ``runtime.lock``)."""
        try:
            return ensure_service().process_runs(runs)
        except (InputGapError, StateError, BudgetError, ConfigError) as error:
            # exit at once: nothing of this batch is durable, and leaving through Faust
            # would acknowledge its records (their offsets could then be committed)
            end_worker(error, even_when_stopping=True)
            raise

    async def process_and_commit(runs: Sequence[Run]) -> None:
        """The checkpoint protocol on one batch, start to end (the stream input path)."""
        received = time.perf_counter()
        async with runtime.lock:
            await settle()
            await commit(process(runs), received=received)
            runtime.batches += 1
            runtime.records += sum(len(run) for run in runs)

    async def settle() -> None:
        """Wait until the batch in flight is durable, published and acknowledged."""
        in_flight, runtime.in_flight = runtime.in_flight, None
        if in_flight is not None:
            await in_flight

    async def complete(outcome: BatchOutcome, runs: Sequence[Run], received: float) -> None:
        """The checkpoint protocol for a processed batch, then its acknowledgement."""
        await commit(outcome, received=received)
        runtime.batches += 1
        ends = last_offsets(runs)
        runtime.records += sum(count for _, count in ends.values())
        consumer: Any = app.consumer  # the BatchingConsumer (faust_internals.batching_consumer)
        for (topic, partition), (last, count) in ends.items():
            # only now may Faust commit these offsets
            consumer.acknowledge_through(TP(topic, partition), last + 1, count)
        observe_input(ends)

    def observe_input(ends: dict[tuple[str, int], tuple[int, int]]) -> None:
        progress.observe(ends, app.consumer.highwater)

    if queue is not None:
        batches = queue

        @app.task  # type: ignore[untyped-decorator]
        async def ingest_batches() -> None:
            ensure_service()  # /status is ready before the first record arrives
            # Faust's Monitor sensor does per-record bookkeeping nothing here reads (the metrics
            # are streamdp's own); on the batch path it would be a large share of the cost
            with contextlib.suppress(KeyError):
                app.sensors.remove(app.monitor)
            while not worker_stopping(app):
                runs = await batches.take(settings.batch_seconds)
                if not runs:
                    if runtime.in_flight is not None and runtime.in_flight.done():
                        await settle()  # surfaces its error, if any
                    continue
                received = time.perf_counter()
                generation = batches.generation
                try:
                    async with runtime.lock:
                        if runtime.shutting_down:
                            log.info("stopping: last input batch left unacknowledged")
                            return
                        if batches.generation != generation:
                            # partitions were revoked since the take: skip their records
                            owned = {(tp.topic, tp.partition) for tp in app.consumer.assignment()}
                            runs = [r for r in runs if (r[0].topic, r[0].partition) in owned]
                        # this batch is processed while the previous one's checkpoint and
                        # publications travel; its own checkpoint is sent only after the
                        # previous one is acknowledged, so checkpoints stay in order
                        outcome = process(runs)
                        await settle()
                        runtime.in_flight = asyncio.ensure_future(complete(outcome, runs, received))
                except (NotReady, ProducerSendError):
                    if not worker_stopping(app):
                        raise
                    # the worker is stopping (its producer is closing): leave the batch
                    # unacknowledged; the next owner re-reads it from the committed offset
                    # and the checkpoint protocol makes that exact
                    log.info("stopping: last input batch left unacknowledged")
                    return

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def finish_in_flight(sender: Any, **kwargs: Any) -> None:  # noqa: ARG001
        # Faust sends this after stopping the consumer and before flushing and stopping the
        # producer: the batch in flight completes now, while the producer still runs
        async with runtime.lock:
            runtime.shutting_down = True
            try:
                await settle()
            except (NotReady, ProducerSendError) as exc:
                log.info("stopping: last input batch left unacknowledged (%r)", exc)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:  # noqa: ARG001
        service = runtime.service
        if service is None:
            return
        async with runtime.lock:
            # the batch in flight is durable before the partitions' next owner reads them
            await settle()
            if queue is not None:
                queue.drop({(tp.topic, tp.partition) for tp in revoked})
            dropped = service.drop({tp.partition for tp in revoked})
        if dropped:
            log.info("partitions revoked: released sources %s", ", ".join(sorted(dropped)))

    if settings.stall_exit_seconds > 0:
        watchdog = StallWatchdog(app, runtime, progress, input_names, changelog_topic)

        interval = watchdog_interval(settings.stall_exit_seconds)

        @app.timer(interval=interval)  # type: ignore[untyped-decorator]
        async def exit_when_input_stalls() -> None:
            await watchdog.check()

    @app.timer(interval=settings.tick_seconds)  # type: ignore[untyped-decorator]
    async def follow_public_clock() -> None:
        """Every owned source follows the public clock: periods close on schedule whether or
        not records arrive. Sources whose home partition was assigned are started here, once
        the state table is restored (never from a partly restored table)."""
        service = runtime.service
        if service is None or not runtime.ready or getattr(app, "rebalancing", False):
            return
        async with runtime.lock:
            if runtime.shutting_down:
                return
            await settle()
            homes = {tp.partition for tp in app.consumer.assignment() if tp.topic in source_topics}
            outcome = service.assign(homes)
            if outcome.writes or outcome.publications:
                await commit(outcome)
            # one paced step per tick (32 periods per stream at most): after downtime the
            # backlog of due periods is worked off over several ticks, between input batches
            outcome = service.tick()
            if outcome.writes or outcome.publications:
                await commit(outcome)

    serve_pages(app, runtime)
    return app, runtime
