"""``streamdp worker``: run one Faust worker of the release daemon.

Flags override ``STREAMDP_*`` environment variables (see :mod:`streamdp.daemon.settings`).
The same app is available to Faust's own CLI: ``STREAMDP_CONFIG=spec.toml faust -A
streamdp.daemon.faust_app worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamdp.daemon.service import OutputTopics
from streamdp.daemon.settings import DaemonSettings, env_settings
from streamdp.errors import EXIT_CONFIG, EXIT_STOPPED, ConfigError

#: After SIGTERM or SIGINT, the longest wait for the graceful stop (finish the batch in flight,
#: flush, commit offsets); then the process exits anyway, as after a SIGKILL, which the
#: checkpoint protocol makes exact (nothing unacknowledged is lost: the next owner re-reads it).
STOP_DEADLINE_SECONDS = 5.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="stream specification (TOML); or STREAMDP_CONFIG")
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap HOST:PORT[,...]; or STREAMDP_BOOTSTRAP"
    )
    parser.add_argument("--app-id", help="Faust app id = consumer group (default streamdp)")
    parser.add_argument(
        "--partitions",
        type=int,
        help="partitions of the input, control and state topics (all equal; default 12)",
    )
    parser.add_argument("--web-host", help="address of /metrics and /status (default 127.0.0.1)")
    parser.add_argument("--web-port", type=int, help="port of /metrics and /status (default 6066)")
    parser.add_argument("--data-dir", type=Path, help="Faust data directory")
    parser.add_argument("--standby-replicas", type=int, help="Faust table standby replicas")
    parser.add_argument(
        "--clock",
        metavar="CLOCK",
        help="the public clock that closes periods: wall (default), frozen:INSTANT (periods "
        "close only on operator close records) or simulated:INSTANT@UNIX_SECONDSxRATE; or "
        "STREAMDP_CLOCK",
    )
    parser.add_argument(
        "--tick",
        type=float,
        metavar="SECONDS",
        help="how often every owned source is advanced to the clock (default 0.5)",
    )
    parser.add_argument(
        "--input-volume-metrics",
        action="store_true",
        help="export records read, rejected by reason and consumer lag on /metrics: they "
        "reveal input volume, so /metrics becomes a PROTECTED surface (default off; or "
        "STREAMDP_METRICS_INPUT_VOLUME=1)",
    )
    parser.add_argument(
        "--session-timeout", type=float, help="consumer group session timeout, seconds"
    )
    parser.add_argument(
        "--single-record-batches",
        action="store_true",
        help="one record per produce batch (needed on the embedded Tansu broker)",
    )
    parser.add_argument(
        "--allow-input-gaps",
        action="store_true",
        help="accept holes in input offsets (transactional producers); by default a hole makes "
        "the worker exit and restart from its last checkpoint",
    )
    parser.add_argument(
        "--input-path",
        choices=("stream", "batch"),
        help="how input records reach the release service: per fetch (batch, the default) or "
        "through a Faust agent one by one (stream); same checkpoint protocol",
    )
    parser.add_argument(
        "--stall-exit",
        type=float,
        metavar="SECONDS",
        help="exit (status 75, restart me) when an assigned input partition has records but none "
        "arrived for SECONDS (default 60; 0 = never)",
    )
    parser.add_argument(
        "--insecure-seed",
        type=int,
        metavar="N",
        help="INSECURE seeded noise for tests and demos; never for real releases",
    )
    parser.add_argument(
        "--topic-namespace",
        help="output topics are NS.releases, NS.consistent, NS.dead-letter, NS.control "
        "(default streamdp); or STREAMDP_TOPIC_NAMESPACE",
    )
    parser.add_argument(
        "--max-batch", type=int, help="most input records per processed batch (default 5000)"
    )
    parser.add_argument(
        "--batch-seconds",
        type=float,
        help="longest wait to fill a batch, seconds (default 0.2; bounds period-close latency)",
    )
    parser.add_argument(
        "--fetch-wait",
        type=float,
        metavar="SECONDS",
        help="longest fetch long-poll, seconds (default 0.1; Faust's own is 1.5)",
    )
    parser.add_argument("--log-level", help="debug, info, warning, error (default info)")
    parser.add_argument(
        "--stop-deadline",
        type=float,
        metavar="SECONDS",
        default=STOP_DEADLINE_SECONDS,
        help="after SIGTERM/SIGINT, exit at the latest after SECONDS even if the graceful stop "
        f"has not finished (default {STOP_DEADLINE_SECONDS:g})",
    )


def settings_from_args(args: argparse.Namespace) -> DaemonSettings:
    values = env_settings(args.config)
    flags = {
        "bootstrap": args.bootstrap,
        "app_id": args.app_id,
        "partitions": args.partitions,
        "web_host": args.web_host,
        "web_port": args.web_port,
        "data_dir": args.data_dir,
        "standby_replicas": args.standby_replicas,
        "clock": args.clock,
        "tick_seconds": args.tick,
        "stall_exit_seconds": args.stall_exit,
        "input_path": args.input_path,
        "session_timeout": args.session_timeout,
        "insecure_seed": args.insecure_seed,
        "log_level": args.log_level,
        "max_batch": args.max_batch,
        "batch_seconds": args.batch_seconds,
        "fetch_wait_seconds": args.fetch_wait,
    }
    values.update({k: v for k, v in flags.items() if v is not None})
    if args.topic_namespace:
        values["topic_namespace"] = args.topic_namespace
    if args.allow_input_gaps:
        values["allow_input_gaps"] = True
    if args.single_record_batches:
        values["single_record_batches"] = True
    if args.input_volume_metrics:
        values["metrics_input_volume"] = True
    namespace = values.pop("topic_namespace", None)
    if namespace is not None:
        values["topics"] = OutputTopics.in_namespace(str(namespace))
    known = {f.name for f in dataclasses.fields(DaemonSettings)}
    return DaemonSettings(**{k: v for k, v in values.items() if k in known}).validate()  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from streamdp.daemon.app import create_app
    from streamdp.daemon.topology import required_topics

    if not 0 < args.stop_deadline <= 600:
        raise ConfigError(
            f"--stop-deadline must be > 0 and <= 600 seconds, got {args.stop_deadline}"
        )
    app, runtime = create_app(settings)
    try:
        check_topics(settings, required_topics(runtime.spec, settings))
    except ConfigError as error:
        _say(f"fatal configuration problem, exit status {EXIT_CONFIG}: {error}")
        return EXIT_CONFIG
    import faust

    from streamdp.daemon.gc_tuning import tune_garbage_collector
    from streamdp.daemon.log_safety import plain_worker

    tune_garbage_collector()
    worker = plain_worker(faust.Worker(app, loglevel=settings.log_level, quiet=True))
    arm_stop_deadline(worker, args.stop_deadline)
    return worker.execute_from_commandline()  # runs until SIGTERM/SIGINT, then exits


# ------------------------------------------------------------------ stopping within a deadline
_deadline_lock = threading.Lock()
_deadline_started = False


def arm_stop_deadline(worker: Any, seconds: float) -> None:
    """Make ``worker`` (a ``faust.Worker``) exit at the latest ``seconds`` after its first
    SIGTERM or SIGINT: Faust's graceful stop can wait far longer (about a minute with the broker
    unreachable, for ever behind a crashed producer). Call before the worker starts."""
    for name in ("_on_sigterm", "_on_sigint"):
        setattr(worker, name, _with_deadline(getattr(worker, name), seconds))


def _with_deadline(handler: Callable[[], None], seconds: float) -> Callable[[], None]:
    def on_signal() -> None:
        start_stop_deadline(seconds)
        handler()

    return on_signal


def start_stop_deadline(seconds: float) -> None:
    """Start the stop deadline (once per process): a daemon thread that ends the process with
    status 0 after ``seconds``, whatever the event loop is doing."""
    global _deadline_started  # noqa: PLW0603 - one deadline per process
    with _deadline_lock:
        if _deadline_started:
            return
        _deadline_started = True
    timer = threading.Timer(seconds, _exit_at_deadline, args=(seconds,))
    timer.daemon = True
    timer.start()


def _exit_at_deadline(seconds: float) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    line = (
        f"[{stamp}] [{os.getpid()}] [CRITICAL] not stopped {seconds:g} s after the stop signal: "
        f"exiting now (status {EXIT_STOPPED}); nothing unacknowledged is lost, the partitions' "
        "next owner re-reads it\n"
    )
    os.write(2, line.encode())  # not logging: its locks may be held by the stuck loop
    os._exit(EXIT_STOPPED)


# ------------------------------------------------------------------ topics before start
def check_topics(settings: DaemonSettings, required: dict[str, int]) -> None:
    """:func:`verify_topics` before Faust starts (on a loop of its own)."""
    loop = asyncio.new_event_loop()  # leaves the thread's current loop alone for Faust
    try:
        loop.run_until_complete(verify_topics(settings, required))
    finally:
        loop.close()


async def verify_topics(
    settings: DaemonSettings, required: dict[str, int], *, retry_seconds: float = 2.0
) -> None:
    """Raise :class:`ConfigError` unless every topic the worker uses exists, with the configured
    partition count for the co-partitioned ones (inputs, control, state changelog). Asked before
    Faust subscribes (a broker that creates topics on demand would otherwise create a missing
    one with its default partition count). Waits while the broker cannot be reached, saying so
    every 30 s; a stop signal ends the wait at once."""
    warned = -30.0
    # aiokafka logs every failed connection attempt as an error: while waiting for a broker,
    # the one line below (every 30 s) says it instead
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        existing = await _wait_for_topics(settings, retry_seconds, warned)
    finally:
        quiet.setLevel(level)
    missing = sorted(t for t in required if t not in existing)

    if missing:
        raise ConfigError(
            f"topic(s) {', '.join(missing)} do not exist on {settings.bootstrap}; create every "
            "topic the worker uses before starting it (streamdp.daemon.topology.required_topics; "
            "docs/operating.md)"
        )
    co_partitioned = _co_partitioned(settings, required)
    wrong = {t: existing[t] for t in co_partitioned if existing[t] != settings.partitions}
    if wrong:
        listing = ", ".join(f"{t} has {n}" for t, n in sorted(wrong.items()))
        raise ConfigError(
            f"topics read together must have --partitions {settings.partitions} partitions, "
            f"but {listing}; recreate them or start the worker with the topics' count"
        )


async def _wait_for_topics(
    settings: DaemonSettings, retry_seconds: float, warned: float
) -> dict[str, int]:
    while True:
        try:
            return await _broker_topics(settings)
        except (TimeoutError, OSError) as error:
            now = time.monotonic()
            if now - warned >= 30.0:
                _say(
                    f"no Kafka broker answers at {settings.bootstrap} ({type(error).__name__}); "
                    "waiting for it before starting (start one: streamdp broker --config SPEC; "
                    "or fix --bootstrap). Ctrl-C stops"
                )
                warned = now
            await asyncio.sleep(retry_seconds)


def verify_topics_at_start(app: Any, settings: DaemonSettings, required: dict[str, int]) -> None:
    """Run :func:`verify_topics` first thing when ``app`` (a ``faust.App``) starts, for workers
    started by Faust's own CLI; a problem ends the process with status 78 and one line."""
    first_start = app.on_first_start

    async def verify_then_start() -> None:
        try:
            await verify_topics(settings, required)
        except ConfigError as error:
            _say(f"fatal configuration problem, exit status {EXIT_CONFIG}: {error}")
            os._exit(EXIT_CONFIG)
        await first_start()

    app.on_first_start = verify_then_start


def _say(line: str) -> None:
    """One line on stderr (logging is set up only when Faust's worker starts)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _co_partitioned(settings: DaemonSettings, required: dict[str, int]) -> list[str]:
    outputs = {settings.topics.releases, settings.topics.consistent, settings.topics.dead_letter}
    return [t for t in required if t not in outputs]


async def _broker_topics(settings: DaemonSettings) -> dict[str, int]:
    """Topic -> partition count, from one metadata request (which creates no topic)."""
    from aiokafka import AIOKafkaClient
    from aiokafka.errors import KafkaError

    client = AIOKafkaClient(
        bootstrap_servers=[b.strip() for b in settings.bootstrap.split(",")],
        request_timeout_ms=10_000,
        **_client_security(settings),
    )
    try:
        try:
            await asyncio.wait_for(client.bootstrap(), timeout=15.0)
            metadata = await asyncio.wait_for(client.fetch_all_metadata(), timeout=15.0)
        except KafkaError as error:
            raise ConnectionError(str(error)) from error
        return {t: len(metadata.partitions_for_topic(t) or ()) for t in metadata.topics()}
    finally:
        await client.close()


def _client_security(settings: DaemonSettings) -> dict[str, Any]:
    if settings.security_protocol == "PLAINTEXT":
        return {}
    import ssl

    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=settings.ssl_cafile)
        if settings.ssl_certfile:
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL"):
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password
    return options
