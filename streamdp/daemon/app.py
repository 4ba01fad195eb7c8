"""The Faust adapter: topics, the state table, the ingest agent, timers, ``/metrics``, ``/status``.

Thin on purpose: all decisions are in :class:`~streamdp.daemon.service.ReleaseService`. The agent
takes batches of input records and, for each batch, follows the service's protocol:

1. write the checkpoint (noisy nodes, event-id chunks, outbox, hot state) to the ``state``
   table's changelog and wait until the broker acknowledged every write;
2. publish the outputs and wait for their acknowledgements;
3. delete the outbox entries;
4. return, after which Faust acknowledges the batch's input records (their offsets get committed).

On the batch input path (the default) the next batch is processed while the previous one goes
through steps 1-4; its own step 1 starts only when the previous batch is done, so checkpoints
reach the changelog in order. A revocation or a shutdown waits for the batch in flight.

The table's keys are source names (plus node/outbox keys); its changelog partition is the
partition of the source's input records, so it is co-partitioned with the input topics and moves
with them on a rebalance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import faust
from faust.exceptions import NotReady, ProducerSendError
from faust.types import TP
from prometheus_client import CONTENT_TYPE_LATEST

from streamdp import __version__
from streamdp.daemon.batch_input import BatchQueue, InputStallWatch, last_offsets
from streamdp.daemon.exits import fatal_exit
from streamdp.daemon.log_safety import hold_value_loggers
from streamdp.daemon.runtime import WorkerRuntime, sampler_for
from streamdp.daemon.service import BatchOutcome, ReleaseService, Run, runs_of
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import STATE_TABLE, broker_credentials
from streamdp.engine import load_spec
from streamdp.engine.clock import parse_clock
from streamdp.engine.periods import PeriodClock
from streamdp.engine.stream import check_releasable
from streamdp.errors import (
    EXIT_INPUT_GAP,
    BudgetError,
    ConfigError,
    InputGapError,
    StateError,
)
from streamdp.faust_internals import (
    batching_consumer,
    committed_offset,
    fetch_view,
    replace_crash_handler,
    tuned_fetching,
)
from streamdp.metrics import StreamdpMetrics

log = logging.getLogger("streamdp.daemon")
__all__ = ["create_app"]


def _stopping(app: Any) -> bool:
    """True once the worker has begun to stop (read anew at each call)."""
    return bool(app.should_stop)


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

    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{b.strip()}" for b in settings.bootstrap.split(",")],
        broker_credentials=broker_credentials(settings),
        store="memory://",
        processing_guarantee="at_least_once",
        topic_allow_declare=False,
        topic_disable_leader=True,
        topic_partitions=settings.partitions,
        table_standby_replicas=settings.standby_replicas,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        broker_rebalance_timeout=max(10.0, 2 * settings.session_timeout),
        broker_commit_interval=settings.commit_interval,
        consumer_auto_offset_reset="earliest",
        producer_max_batch_size=1 if settings.single_record_batches else 16384,
        producer_acks=-1 if settings.producer_acks == "all" else int(settings.producer_acks),
        # every write is bounded below this by construction (settings.WRITE_BOUNDS)
        producer_max_request_size=settings.max_request_size,
        # the batch input path acknowledges after its checkpoint; records of a revoked
        # partition it drops are never acknowledged, so Faust must not wait for them
        stream_wait_empty=settings.input_path != "batch",
        web_enabled=True,
        # Faust's default routes would serve table contents (raw partial sums) over HTTP:
        # only /metrics and /status are served
        web_tables_enabled=False,
        web_router_enabled=False,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        datadir=str(settings.data_dir),
        version=1,
    )
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
    inputs = app.topic(
        *input_names,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    outputs = {
        name: app.topic(
            name, key_type=str, value_type=str, key_serializer="raw", value_serializer="raw"
        )
        for name in (
            settings.topics.releases,
            settings.topics.consistent,
            settings.topics.dead_letter,
        )
    }
    state = app.Table(
        STATE_TABLE,
        default=None,
        partitions=settings.partitions,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
    )

    def recovered() -> bool:
        recovery = getattr(app.tables, "recovery", None)
        return recovery is not None and bool(recovery.completed.is_set())

    runtime.recovered = recovered

    def end_worker(reason: BaseException, *, even_when_stopping: bool = False) -> None:
        """Stop being ready, log one line and exit with the status of ``reason`` (nothing of
        the batch in flight is acknowledged: leaving through Faust could commit its offsets).
        While the worker is stopping anyway, errors of closing services are left to Faust and
        the stop deadline, unless ``even_when_stopping``."""
        if not even_when_stopping and (_stopping(app) or runtime.shutting_down):
            return
        status, line = fatal_exit(reason)
        runtime.fatal = line
        log.critical("%s", line)
        logging.shutdown()
        os._exit(status)

    # Faust marks a crashed task, timer or service (a producer whose send failed, a consumer
    # whose commit failed) and its parents as crashed, then keeps the process up (frozen,
    # still "ready") or lets a supervisor restart it for ever: every crash ends the worker
    def crash_then(faust_crash: Callable[[BaseException], None]) -> Callable[[BaseException], None]:
        def crash_and_exit(reason: BaseException) -> None:
            end_worker(reason)  # first: a crashed app reports should_stop
            faust_crash(reason)

        return crash_and_exit

    replace_crash_handler(app, crash_then)
    faust_crash_async = app.crash

    async def crash_async_and_exit(reason: BaseException) -> None:
        end_worker(reason)  # before Faust logs the crash with its traceback: one line only
        await faust_crash_async(reason)

    app.crash = crash_async_and_exit  # type: ignore[method-assign]
    lag: dict[tuple[str, int], int] = {}
    next_offset: dict[tuple[str, int], int] = {}  # next input offset to process, per partition
    stall_watch = InputStallWatch(settings.stall_exit_seconds)

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

    async def commit(outcome: BatchOutcome, *, received: float | None = None) -> None:
        # 1. checkpoint durable before anything derived from it leaves the process
        pending = []
        for write in outcome.writes:
            if write.value is None:
                state.data.pop(write.key, None)
                pending.append(
                    state.send_changelog(write.partition, write.key, None, value_serializer="raw")
                )
            else:
                state.data[write.key] = write.value
                pending.append(state.send_changelog(write.partition, write.key, write.value))
        if pending:
            await asyncio.gather(*pending)
        # 2. publish
        sent = [
            await outputs[p.topic].send(key=p.key.encode(), value=p.value.encode())
            for p in outcome.publications
        ]
        if sent:
            await asyncio.gather(*sent)
        # 3. clear the outbox (a lost deletion only re-publishes identical records later)
        for write in outcome.cleanup:
            state.data.pop(write.key, None)
            state.send_changelog(write.partition, write.key, None, value_serializer="raw")
        latency = None if received is None else time.perf_counter() - received
        _observe(outcome, latency)

    def _observe(outcome: BatchOutcome, latency: float | None) -> None:
        now = time.time()
        for letter in outcome.dead_letters:
            metrics.record_rejected(letter.topic or "-", letter.reason)
        by_stream: dict[str, dict[str, float]] = {}
        last: dict[str, Any] = {}
        for release in outcome.releases:
            by_stream.setdefault(release.stream, {})[release.counter] = float(release.noisy_total)
            last[release.stream] = release
        service = runtime.service
        for stream, totals in by_stream.items():
            release = last[stream]
            runtime_stream = None
            if service is not None:
                engine = service.engines().get(spec.streams[stream].source)
                runtime_stream = engine.streams[stream] if engine is not None else None
            clock = PeriodClock(spec.streams[stream].period)
            start, end = clock.bounds(runtime_stream.closed if runtime_stream else 0)
            metrics.record_release(
                stream,
                epoch=release.epoch,
                periods_released=release.period,
                period_seconds=end - start,
                stddev=release.total_std,
                noisy_running_totals=totals,
                published_at=now,
                # from receipt of the batch whose records closed the period to the broker's
                # acknowledgement of the release
                close_latency_seconds=latency,
            )
        latest_revision: dict[str, Any] = {}
        for revision in outcome.revisions:
            latest_revision[revision.stream] = revision
        for stream, revision in latest_revision.items():
            stats = None
            if service is not None:
                engine = service.engines().get(spec.streams[stream].source)
                if engine is not None:
                    stats = engine.streams[stream].last_revision
            metrics.record_consistency(
                stream,
                residual=stats.residual if stats else 0.0,
                duration_seconds=stats.seconds if stats else 0.0,
                consistent_running_totals={k: float(v) for k, v in revision.totals.items()},
            )

    @app.agent(inputs, name="streamdp-ingest")
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
        """Steps 1-4 of the protocol for a processed batch, then its acknowledgement."""
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
        per_topic: dict[str, int] = {}
        for key, (last, count) in ends.items():
            topic = key[0]
            per_topic[topic] = per_topic.get(topic, 0) + count
            next_offset[key] = max(next_offset.get(key, 0), last + 1)
            stall_watch.progressed(key)
            try:
                lag[key] = max(0, int(app.consumer.highwater(TP(*key))) - last - 1)
            except (KeyError, TypeError, AttributeError, AssertionError, NotReady):
                # AssertionError: aiokafka's answer for a partition revoked meanwhile (a
                # rebalance while the batch was written); its lag is its next owner's to report
                continue
        for topic, count in per_topic.items():
            metrics.record_input(topic, count)
            metrics.set_consumer_lag(topic, sum(v for (t, _), v in lag.items() if t == topic))

    if queue is not None:
        batches = queue

        @app.task  # type: ignore[untyped-decorator]
        async def ingest_batches() -> None:
            ensure_service()  # /status is ready before the first record arrives
            # Faust's Monitor sensor does per-record bookkeeping nothing here reads (the metrics
            # are streamdp's own); on the batch path it would be a large share of the cost
            with contextlib.suppress(KeyError):
                app.sensors.remove(app.monitor)
            while not _stopping(app):
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
                    if not _stopping(app):
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
        stall = settings.stall_exit_seconds

        @app.timer(interval=max(0.5, min(5.0, stall / 4)))  # type: ignore[untyped-decorator]
        async def exit_when_input_stalls() -> None:
            # only a partition the consumer could fetch counts (streamdp.daemon.batch_input.
            # InputStallWatch): not while the worker joins the group, a checkpoint is being
            # written, or the partition's leader (in a table recovery: its changelog
            # partition's leader) is down or unknown. A recovery that stalls with its leaders
            # up still counts: a restart clears faust-streaming's stuck recoveries
            now = time.monotonic()
            consumer = app.consumer
            in_flight = runtime.in_flight
            recovering = bool(getattr(app, "in_recovery", False))
            blocked = (
                _stopping(app)
                or (bool(getattr(app, "rebalancing", False)) and not recovering)
                or runtime.lock.locked()
                or (in_flight is not None and not in_flight.done())
            )
            for tp in list(consumer.assignment()):
                if tp.topic not in input_names:
                    continue
                key = (tp.topic, tp.partition)
                view = fetch_view(consumer, tp)
                done = max(next_offset.get(key, 0), committed_offset(consumer, tp))
                restoring_from = (
                    fetch_view(consumer, TP(changelog_topic, tp.partition)) if recovering else None
                )
                waits_for_changelog = (
                    restoring_from is not None and not restoring_from.leader_reachable
                )
                waited = stall_watch.check(
                    key, view, done, blocked=blocked or waits_for_changelog, now=now
                )
                if waited is not None and view is not None and view.end is not None:
                    async with runtime.lock:
                        fetched = view.fetched is not None and view.fetched > done
                        log.critical(
                            "input %s[%d] has records up to offset %d but none from %d arrived "
                            "for %.0f s while they could be fetched (%s): exiting to restart "
                            "from the last checkpoint",
                            tp.topic, tp.partition, view.end - 1, done, waited,
                            "fetched and never delivered: faust-streaming dropped a fetch"
                            if fetched else f"leader node {view.leader} reachable, none fetched",
                        )  # fmt: skip
                        logging.shutdown()
                        os._exit(EXIT_INPUT_GAP)

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
            homes = {
                tp.partition for tp in app.consumer.assignment() if tp.topic in source_topics
            }
            outcome = service.assign(homes)
            if outcome.writes or outcome.publications:
                await commit(outcome)
            # one paced step per tick (32 periods per stream at most): after downtime the
            # backlog of due periods is worked off over several ticks, between input batches
            outcome = service.tick()
            if outcome.writes or outcome.publications:
                await commit(outcome)

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:  # noqa: ARG001
        body = metrics.exposition().decode("utf-8")
        return web.text(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/status")
    async def status_view(web: Any, request: Any) -> Any:  # noqa: ARG001
        # 503 until the state table is restored: readiness probes must not route to a worker
        # that would start a source from empty state
        return web.json(runtime.status(), status=200 if runtime.ready else 503)

    return app, runtime
