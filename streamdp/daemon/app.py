"""The Faust adapter: ``create_app`` builds one worker's Faust app and wires its parts.

Thin on purpose: all decisions are in :class:`~streamdp.daemon.service.ReleaseService`. Each
part is in its module; this one only connects them to Faust's agent, task, timers, signals and
pages:

- ``faust_setup``: the Faust app, its input and output topics and the ``state`` table;
- ``batches``: input batches, the public clock's tick and the rebalance and shutdown hooks,
  each through the release service and then the checkpoint protocol;
- ``commit``: the checkpoint protocol (checkpoint acknowledged, then publications
  acknowledged, then the outbox cleared), after which a batch's input records are acknowledged;
- ``observation``: metrics of committed outcomes and of input progress;
- ``watchdog``: the input-stall watchdog; ``fatal``: every crash ends the worker;
- ``diagnostics``: the dump a SIGUSR1 or SIGUSR2 logs (installed by the worker command);
- ``pages``: ``/metrics`` and ``/status``; ``runtime``: what the worker holds besides Faust.

The table's keys are source names (plus node/outbox keys); its changelog partition is the
partition of the source's input records, so it is co-partitioned with the input topics and moves
with them on a rebalance.
"""

from __future__ import annotations

import logging
from typing import Any

import faust

from streamdp import __version__
from streamdp.daemon.batch_input import BatchQueue
from streamdp.daemon.batches import BatchDriver
from streamdp.daemon.close_witness import CloseWitnesses
from streamdp.daemon.commit import CheckpointCommit
from streamdp.daemon.fatal import exit_on_crash, worker_ender
from streamdp.daemon.faust_setup import declare_topics, new_faust_app
from streamdp.daemon.log_safety import hold_value_loggers
from streamdp.daemon.membership_lease import MembershipLease, lease_margin
from streamdp.daemon.observation import InputProgress, OutcomeObserver, period_seconds_at_start
from streamdp.daemon.pages import serve_pages
from streamdp.daemon.runtime import WorkerRuntime, sampler_for
from streamdp.daemon.service import ReleaseService
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.skipped_offsets import SkippedOffsets
from streamdp.daemon.stall_watch import InputStallWatch
from streamdp.daemon.topology import STATE_TABLE
from streamdp.daemon.watchdog import StallWatchdog, watchdog_interval
from streamdp.engine import EngineSpec, load_spec
from streamdp.engine.clock import parse_clock
from streamdp.engine.privacy_unit import load_unit_key
from streamdp.engine.scanned_orders import NATIVE_SCANNER_BUILT
from streamdp.engine.stream import check_releasable
from streamdp.errors import ConfigError
from streamdp.faust_internals import (
    acknowledged_commits,
    batching_consumer,
    committed_offset,
    honest_commits,
    note_skipped_offsets,
    tuned_fetching,
)
from streamdp.metrics import StreamdpMetrics

log = logging.getLogger("streamdp.daemon")
__all__ = ["create_app"]


def worker_unit_key(settings: DaemonSettings, spec: EngineSpec) -> bytes | None:
    """The privacy-unit key from ``--unit-key-file`` when a stream declares a unit (refused
    at start without one); None when no stream does (and a key file given then is refused:
    the operator believes some stream protects people, and none does)."""
    units = [name for name, s in spec.streams.items() if s.privacy_unit is not None]
    if not units:
        if settings.unit_key_file is not None:
            raise ConfigError(
                "--unit-key-file / STREAMDP_UNIT_KEY_FILE keys a privacy unit's identifiers, "
                f"and no stream of {str(settings.config)!r} has a privacy_unit: drop it (or "
                "declare the unit in the spec)"
            )
        return None
    if settings.unit_key_file is None:
        raise ConfigError(
            f"stream {units[0]!r} declares a privacy_unit: give the worker the secret key its "
            "unit identifiers are hashed under with --unit-key-file FILE or "
            "STREAMDP_UNIT_KEY_FILE (e.g. head -c 32 /dev/urandom | base64 > FILE), the same "
            "on every restart"
        )
    return load_unit_key(str(settings.unit_key_file))


def create_app(settings: DaemonSettings) -> tuple[faust.App, WorkerRuntime]:
    """Build the Faust app of one worker (does not start it)."""
    settings.validate()
    hold_value_loggers(show_offsets=settings.metrics_input_volume)
    spec = load_spec(settings.config)
    for stream_spec in spec.streams.values():
        check_releasable(stream_spec)  # refused at start, not when its first record arrives
    unit_key = worker_unit_key(settings, spec)
    metrics = StreamdpMetrics(input_volume=settings.metrics_input_volume)
    runtime = WorkerRuntime(settings, spec, sampler_for(settings), metrics)
    metrics.record_build(__version__, runtime.sampler.name, secure=bool(runtime.sampler.secure))
    metrics.record_start(runtime.started_at)
    public_clock = parse_clock(settings.clock)
    if public_clock.describe() != "wall":
        log.warning("public clock: %s (not the wall clock)", public_clock.describe())
    if not NATIVE_SCANNER_BUILT and any(s.counters.kind == "items" for s in spec.streams.values()):
        log.warning(
            "the native order scanner is not built (no C compiler when streamdp was installed): "
            "every order is read on the Python path, the same results at about 2.5 times the "
            "CPU per order (README, Daemon)"
        )
    metrics.bind_ledger(runtime.budget_view)
    for name, stream_spec in spec.streams.items():
        metrics.configure_stream(
            name,
            horizon_periods=stream_spec.horizon,
            allowed_lateness_seconds=stream_spec.allowed_lateness_seconds,
            period_seconds=period_seconds_at_start(stream_spec, public_clock.now()),
        )

    app = new_faust_app(settings)
    source_topics = {s.topic for s in spec.sources.values()}
    input_names = [s.topic for s in spec.sources.values()] + [settings.topics.control]
    metrics.configure_input(
        input_names, [n for n, s in spec.streams.items() if s.privacy_unit is not None]
    )
    changelog_topic = f"{settings.app_id}-{STATE_TABLE}-changelog"
    queue: BatchQueue | None = None
    # writes and publications only while the group cannot have given the partitions away
    lease = MembershipLease(
        session_timeout=settings.session_timeout,
        rebalance_timeout=settings.rebalance_timeout,
        margin=lease_margin(settings.session_timeout),
    )
    # the periods closed, witnessed by the input group's commits (a restored state copy that
    # closed fewer is refused: streamdp.daemon.close_witness)
    witnesses = CloseWitnesses()
    consumer_class = honest_commits(
        tuned_fetching(
            app.transport.Consumer,
            fetch_wait_seconds=settings.fetch_wait_seconds,
            lease=lease,
            witnesses=witnesses,
        )
    )
    if settings.input_path == "batch":
        queue = BatchQueue(input_names, settings.max_batch, clock=public_clock.now)
        consumer_class = batching_consumer(consumer_class, queue, witnesses)
    else:
        consumer_class = acknowledged_commits(consumer_class, witnesses)
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
        state,
        topics.outputs,
        OutcomeObserver(metrics, spec),
        lease,
        # a checkpoint still travelling when the lease ends: exit now (os._exit, no flush), so
        # that what is still queued in the producer never lands after an expulsion
        abandon=lambda lost: end_worker(lost, even_when_stopping=True),
    )

    skipped_offsets = SkippedOffsets()  # holes of Kafka's design are not lost records
    note_skipped_offsets(skipped_offsets)

    def new_service() -> ReleaseService:
        return ReleaseService(
            spec,
            sampler=runtime.sampler,
            state=state.data,
            topics=settings.topics,
            topic_partitions=dict.fromkeys(input_names, settings.partitions),
            allow_gaps=settings.allow_input_gaps,
            skipped_offsets=skipped_offsets,
            clock=public_clock.now,
            unit_key=unit_key,
            reading_at=public_clock.at,
            allowance=settings.delivery_allowance_seconds * public_clock.rate,
            # what the group committed, as Faust read it when the partition was assigned: a
            # stored state behind it is refused (lost, truncated or an older copy)
            committed_offset=lambda topic, partition: committed_offset(
                app.consumer, faust.types.TP(topic, partition)
            ),
            closes_witnessed=witnesses.witnessed,
            warn_broker_stamps=settings.metrics_input_volume,
        )

    driver = BatchDriver(
        app,
        runtime,
        protocol=protocol,
        progress=progress,
        end_worker=end_worker,
        new_service=new_service,
        queue=queue,
        source_topics=source_topics,
        witnesses=witnesses,
    )

    @app.agent(topics.inputs, name="streamdp-ingest")
    async def ingest(stream: Any) -> None:
        await driver.ingest_stream(stream)

    if queue is not None:
        batches = queue

        @app.task  # type: ignore[untyped-decorator]
        async def ingest_batches() -> None:
            await driver.ingest_queue(batches)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def finish_in_flight(sender: Any, **kwargs: Any) -> None:  # noqa: ARG001
        # Faust sends this after stopping the consumer and before flushing and stopping the
        # producer: the batch in flight completes now, while the producer still runs
        await driver.finish_in_flight()

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:  # noqa: ARG001
        await driver.revoke(revoked)

    watchdog = StallWatchdog(app, runtime, progress, input_names, changelog_topic)
    runtime.describe_inputs = watchdog.describe
    if settings.stall_exit_seconds > 0:
        interval = watchdog_interval(settings.stall_exit_seconds)

        @app.timer(interval=interval)  # type: ignore[untyped-decorator]
        async def exit_when_input_stalls() -> None:
            await watchdog.check()

    @app.task  # type: ignore[untyped-decorator]
    async def follow_public_clock() -> None:
        await driver.follow_public_clock(public_clock)

    serve_pages(app, runtime)
    return app, runtime
