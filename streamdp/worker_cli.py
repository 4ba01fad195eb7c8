"""``streamdp worker``: run one Faust worker of the release daemon.

Flags override ``STREAMDP_*`` environment variables (see :mod:`streamdp.daemon.settings`).
The same app is available to Faust's own CLI: ``STREAMDP_CONFIG=spec.toml faust -A
streamdp.daemon.faust_app worker``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import LOG_LEVELS, DaemonSettings, env_settings
from streamdp.daemon.stop_deadline import STOP_DEADLINE_SECONDS, arm_stop_deadline
from streamdp.daemon.topic_check import check_topics, say
from streamdp.daemon.web_port import check_web_port
from streamdp.errors import EXIT_CONFIG, ConfigError
from streamdp.topic_namespace import check_namespace


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
    parser.add_argument(
        "--web-port",
        type=int,
        help="port of /metrics and /status (default 6066); a fixed port, not 0 (Prometheus "
        "scrapes a configured address); the worker exits with status 78 if it is taken",
    )
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
        help="the heartbeat of the clock's tick, the only step that closes periods (default "
        "0.5): periods due on time close at their close instant; operators' closes and newly "
        "assigned sources wait for the next heartbeat; after downtime 32 periods per stream "
        "close per heartbeat",
    )
    parser.add_argument(
        "--delivery-allowance",
        type=float,
        metavar="SECONDS",
        help="wall seconds between a period's close instant and its release (default 5): a "
        "record counts when its own Kafka timestamp (CreateTime: when its producer sent it) is "
        "before its period's close and it is received within this allowance after it, so no "
        "other record's processing moves it; set it above the consumer lag you tolerate",
    )
    parser.add_argument(
        "--input-volume-metrics",
        action="store_true",
        help="export records read, rejected by reason, dropped by a privacy unit's bounds, "
        "consumer lag, the period-close latency and the consistency runs' duration on /metrics "
        "(and batches_processed on /status), and show input offsets "
        "in stall and gap log lines and the SIGUSR1 dump, and the state changelog's offsets "
        "in Faust's recovery lines: they reveal input volume, so "
        "/metrics, /status and the logs become PROTECTED surfaces (default off; or "
        "STREAMDP_METRICS_INPUT_VOLUME=true; false, 0, no or off leave them off, another value is "
        "refused)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        help="consumer group session timeout, seconds (default 10, at least 3); the worker "
        "writes only while the group coordinator confirmed its membership within it, less a "
        "quarter of it",
    )
    parser.add_argument(
        "--single-record-batches",
        action="store_true",
        help="one record per produce batch (needed on the embedded Tansu broker)",
    )
    parser.add_argument(
        "--allow-input-gaps",
        action="store_true",
        help="accept every hole in input offsets (only for records removed before the worker "
        "read them, e.g. by retention during a long outage); by default such a hole makes the "
        "worker exit and restart from its last checkpoint. A transaction's markers are always "
        "accepted: transactional producers do not need it",
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
        "arrived for SECONDS, or its committed offset stayed behind durable records for SECONDS "
        "(default 60; 0 = never)",
    )
    parser.add_argument(
        "--start-delay",
        type=float,
        metavar="SECONDS",
        help="wait SECONDS after the configuration, port and topics check out, before joining "
        "the consumer group (default 0; or STREAMDP_START_DELAY): give a supervisor's restart "
        "of a crashed worker a delay longer than the session timeout, e.g. 15",
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
        help="batch input path: longest wait for a batch's first record; stream path: longest "
        "wait to fill a batch; seconds (default 0.2). Periods close on the clock's tick, not on "
        "batches",
    )
    parser.add_argument(
        "--fetch-wait",
        type=float,
        metavar="SECONDS",
        help="longest fetch long-poll, seconds (default 0.1; Faust's own is 1.5)",
    )
    parser.add_argument(
        "--log-level",
        help=f"{', '.join(LOG_LEVELS)} (default info); or STREAMDP_LOG_LEVEL",
    )
    parser.add_argument(
        "--unit-key-file",
        type=Path,
        metavar="FILE",
        help="the secret key privacy-unit identifiers are hashed under (streams with a "
        "privacy_unit; or STREAMDP_UNIT_KEY_FILE): at least 16 bytes, the same on every "
        "restart, kept like the input topic's credentials",
    )
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
        "delivery_allowance_seconds": args.delivery_allowance,
        "stall_exit_seconds": args.stall_exit,
        "start_delay_seconds": args.start_delay,
        "input_path": args.input_path,
        "session_timeout": args.session_timeout,
        "insecure_seed": args.insecure_seed,
        "log_level": args.log_level,
        "max_batch": args.max_batch,
        "batch_seconds": args.batch_seconds,
        "fetch_wait_seconds": args.fetch_wait,
        "unit_key_file": args.unit_key_file,
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
        values["topics"] = OutputTopics.in_namespace(check_namespace(str(namespace)))
    known = {f.name for f in dataclasses.fields(DaemonSettings)}
    return DaemonSettings(**{k: v for k, v in values.items() if k in known}).validate()  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from streamdp.daemon.app import create_app
    from streamdp.daemon.topology import input_topics, required_topics

    if not 0 < args.stop_deadline <= 600:
        raise ConfigError(
            f"--stop-deadline must be > 0 and <= 600 seconds, got {args.stop_deadline}"
        )
    app, runtime = create_app(settings)
    try:
        # before the broker (which may be waited for) and again after it and the start delay,
        # just before Faust binds the port: a taken port is one line and status 78, not
        # Faust's traceback
        check_web_port(settings.web_host, settings.web_port)
        check_topics(settings, required_topics(runtime.spec, settings), input_topics(runtime.spec))
        wait_before_joining(settings.start_delay_seconds)
        check_web_port(settings.web_host, settings.web_port)
    except ConfigError as error:
        say(f"fatal configuration problem, exit status {EXIT_CONFIG}: {error}")
        return EXIT_CONFIG
    import faust

    from streamdp.daemon.diagnostics import install_dump_signals
    from streamdp.daemon.gc_tuning import tune_garbage_collector
    from streamdp.daemon.log_safety import plain_worker

    tune_garbage_collector()
    worker = plain_worker(faust.Worker(app, loglevel=settings.log_level, quiet=True))
    arm_stop_deadline(worker, args.stop_deadline)
    install_dump_signals(worker, runtime.describe_inputs)
    return worker.execute_from_commandline()  # runs until SIGTERM/SIGINT, then exits


def wait_before_joining(seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
    """``--start-delay``: wait ``seconds`` (said in one line) before the worker joins the group."""
    if seconds > 0:
        say(f"waiting {seconds:g} s before joining the consumer group (--start-delay)")
        sleep(seconds)
