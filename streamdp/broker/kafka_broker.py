"""A single Apache Kafka node on loopback: the cluster of one that the tests and benchmarks use.

Replication factor 1, and the interface of :class:`streamdp.broker.EmbeddedBroker` where the
tests swap one broker for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from streamdp.broker.kafka_cluster import KafkaCluster
from streamdp.broker.kafka_node import DEFAULT_HEAP_MB


class KafkaBroker(KafkaCluster):
    """One Apache Kafka node (broker and controller) on 127.0.0.1: replication factor 1.

    Same interface as :class:`streamdp.broker.EmbeddedBroker` where the tests use it:
    ``bootstrap``, ``running``, ``log_path``, ``log_tail()``, ``create_topics()``, context
    manager, ``start_timeout``.
    """

    def __init__(
        self,
        *,
        log_path: Path | None = None,
        start_timeout: float = 120.0,
        heap_mb: int = DEFAULT_HEAP_MB,
        libs: Path | None = None,
        extra_properties: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            1,
            log_path=log_path,
            start_timeout=start_timeout,
            heap_mb=heap_mb,
            libs=libs,
            extra_properties=extra_properties,
        )

    @property
    def port(self) -> int:
        """The TCP port of the broker's client listener (127.0.0.1)."""
        return self._node(0).port
