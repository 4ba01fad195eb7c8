"""Topics and partition leadership of an Apache Kafka cluster, through the aiokafka admin client.

:class:`KafkaTopics` is the part of :class:`streamdp.broker.kafka_cluster.KafkaCluster` that
talks to a running cluster: create topics (with this cluster's replication factor, optionally
placing each partition's leader on a chosen node), read partition metadata, and wait for the
moves a fault test provokes: a new leader, every replica back in sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from streamdp.broker.loopback import check_new_topics, raise_refused_topics, run_in_thread
from streamdp.errors import BrokerError


class KafkaTopics(ABC):
    """Topic creation and partition metadata; the cluster supplies its size and admin client."""

    node_count: int
    replication_factor: int

    @abstractmethod
    async def _admin(self) -> Any:
        """A started ``AIOKafkaAdminClient`` connected to the live nodes (the caller closes it)."""

    @abstractmethod
    def _require_started(self) -> None:
        """Raise :class:`BrokerError` unless the cluster is started."""

    @abstractmethod
    def log_tail(self, n_lines: int = 25) -> str:
        """The last ``n_lines`` of every node's log (for error messages)."""

    async def acreate_topics(
        self,
        topics: Mapping[str, int],
        *,
        config: Mapping[str, Mapping[str, str]] | None = None,
        exist_ok: bool = False,
        leaders: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """Create topics ``{name: partitions}`` with this cluster's replication factor, and
        return once every partition has a leader. ``leaders`` names, for some topics, the node
        that leads each partition (its preferred leader; the other replicas are the next nodes
        in turn), so a test can put two partitions' leaders on different nodes. Raises
        :class:`BrokerError` if a topic exists (unless ``exist_ok``) or the cluster refuses
        it."""
        from aiokafka.admin import NewTopic

        configs = config or {}
        placed = leaders or {}
        check_new_topics(topics, config=configs, leaders=placed)
        for name, nodes in placed.items():
            if len(nodes) != topics[name] or not all(0 <= n < self.node_count for n in nodes):
                raise BrokerError(
                    f"leaders of {name!r} must name one node in 0..{self.node_count - 1} per "
                    f"partition ({topics[name]}), got {list(nodes)}"
                )

        def new_topic(name: str, n: int) -> Any:
            topic_config = dict(configs.get(name, {}))
            if name not in placed:
                return NewTopic(name, n, self.replication_factor, topic_configs=topic_config)
            assignments = {
                partition: [(lead + k) % self.node_count for k in range(self.replication_factor)]
                for partition, lead in enumerate(placed[name])
            }
            return NewTopic(name, -1, -1, assignments, topic_configs=topic_config)

        admin = await self._admin()
        try:
            response = await admin.create_topics([new_topic(name, n) for name, n in topics.items()])
            raise_refused_topics(response, exist_ok=exist_ok, broker="the Kafka cluster")
            deadline = time.monotonic() + 30.0
            while True:
                described = await admin.describe_topics(list(topics))
                missing = [
                    t["topic"]
                    for t in described
                    if t["error_code"] != 0
                    or len(t["partitions"]) != topics[t["topic"]]
                    or any(p["leader"] < 0 for p in t["partitions"])
                ]
                if not missing:
                    return
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"topics {missing} were created but have no leader for every partition "
                        f"after 30 s; node logs:\n{self.log_tail(10)}"
                    )
                await asyncio.sleep(0.1)
        finally:
            await admin.close()

    def create_topics(
        self,
        topics: Mapping[str, int],
        *,
        config: Mapping[str, Mapping[str, str]] | None = None,
        exist_ok: bool = False,
        leaders: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """Blocking :meth:`acreate_topics`; safe with or without a running event loop."""
        self._require_started()
        run_in_thread(
            lambda: self.acreate_topics(topics, config=config, exist_ok=exist_ok, leaders=leaders)
        )

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        """Metadata of ``topic``'s partitions: ``partition``, ``leader`` (node id, -1 if none),
        ``replicas`` and ``isr`` (node ids), sorted by partition."""

        async def go() -> list[dict[str, Any]]:
            admin = await self._admin()
            try:
                described = await admin.describe_topics([topic])
            finally:
                await admin.close()
            entry = described[0]
            if entry["error_code"] != 0:
                raise BrokerError(f"topic {topic!r}: Kafka error {entry['error_code']}")
            return sorted(entry["partitions"], key=lambda p: int(p["partition"]))

        return run_in_thread(go)

    def leader_of(self, topic: str, partition: int) -> int:
        """The node (index = node id) leading ``topic``'s ``partition``; raises
        :class:`BrokerError` when it has no leader right now."""
        for entry in self.partitions(topic):
            if int(entry["partition"]) == partition:
                leader = int(entry["leader"])
                if leader < 0:
                    raise BrokerError(f"{topic}/{partition} has no leader at the moment")
                return leader
        raise BrokerError(f"topic {topic!r} has no partition {partition}")

    def wait_leader_change(
        self, topic: str, partition: int, old_leader: int, timeout: float = 60.0
    ) -> int:
        """Wait until ``topic/partition`` is led by a node other than ``old_leader``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                leader = self.leader_of(topic, partition)
                if leader != old_leader:
                    return leader
            time.sleep(0.25)
        raise BrokerError(
            f"{topic}/{partition} still led by node {old_leader} (or leaderless) after {timeout} s"
        )

    def wait_fully_replicated(self, topics: list[str], timeout: float = 90.0) -> None:
        """Wait until every partition of ``topics`` has all its replicas in sync (the check a
        rolling restart makes before taking the next node down)."""
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            lagging = []
            try:
                for topic in topics:
                    for entry in self.partitions(topic):
                        if set(entry["isr"]) != set(entry["replicas"]) or entry["leader"] < 0:
                            lagging.append(f"{topic}/{entry['partition']} isr={entry['isr']}")
            except Exception as error:
                lagging = [f"{type(error).__name__}: {error}"]
            if not lagging:
                return
            time.sleep(0.5)
        raise BrokerError(
            f"partitions not fully replicated after {timeout} s: {lagging[:10]}; "
            f"node logs:\n{self.log_tail(10)}"
        )
