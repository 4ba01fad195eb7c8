"""``./run kafka``: Apache Kafka (KRaft) on loopback until Ctrl-C, for trying the daemon by hand.

The command line around :class:`streamdp.broker.kafka_cluster.KafkaCluster`: it prints the
bootstrap address, then waits for Ctrl-C or SIGTERM (or a node dying) and stops every node.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from streamdp.broker.kafka_cluster import KafkaCluster
from streamdp.broker.kafka_node import DEFAULT_HEAP_MB
from streamdp.broker.kafka_runtime import KAFKA_VERSION
from streamdp.errors import BrokerError


def main(argv: list[str] | None = None) -> int:
    """``python -m streamdp.broker.kafka [--nodes N]`` (also ``./run kafka``): start Apache
    Kafka on loopback, print the bootstrap address, run until Ctrl-C or SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="streamdp-kafka",
        description=f"Run Apache Kafka {KAFKA_VERSION} (KRaft) on 127.0.0.1 until Ctrl-C.",
    )
    parser.add_argument("--nodes", type=int, default=1, help="broker+controller nodes (1 or 3)")
    parser.add_argument("--heap-mb", type=int, default=DEFAULT_HEAP_MB, help="JVM heap per node")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the node logs go")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: stop.set())
    log_path = args.log_dir / "broker-0.log" if args.log_dir is not None else None
    try:
        cluster = KafkaCluster(args.nodes, log_path=log_path, heap_mb=args.heap_mb)
        with cluster:
            print(f"bootstrap {cluster.bootstrap}", flush=True)  # noqa: T201 - the CLI's output
            print(  # noqa: T201
                f"Apache Kafka {KAFKA_VERSION}: {args.nodes} node(s), replication factor "
                f"{cluster.replication_factor}, logs {cluster.log_path.parent}; Ctrl-C stops",
                flush=True,
            )
            while not stop.wait(1.0):
                if not cluster.running:
                    print(f"a node died:\n{cluster.log_tail()}")  # noqa: T201
                    return 1
    except BrokerError as error:
        print(f"streamdp kafka: {error}", file=sys.stderr)  # noqa: T201
        return 2
    return 0
