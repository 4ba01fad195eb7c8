"""A cluster of Apache Kafka (KRaft) nodes on loopback, for the tests, benchmarks and ./run kafka.

:class:`KafkaCluster` runs ``nodes`` JVMs (:mod:`streamdp.broker.kafka_node`), each a combined
broker and controller, on ``127.0.0.1`` with free ports, with jars from
:mod:`streamdp.broker.kafka_runtime`. Topics get replication factor ``min(3, nodes)`` and
``min.insync.replicas`` ``min(2, nodes)``, the settings of ``deploy/``.

No JVM outlives its owner: :meth:`KafkaCluster.stop` sends SIGTERM to each node's process group,
waits, then SIGKILLs; an ``atexit`` hook stops every cluster still running; and on Linux each
JVM asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``).

Faults for tests: :meth:`KafkaCluster.kill_node` (SIGKILL), :meth:`KafkaCluster.stop_node`
(clean), :meth:`KafkaCluster.restart_node`; topics and leadership: :mod:`.kafka_topics`.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from streamdp.broker.kafka_node import (
    DEFAULT_HEAP_MB,
    LOG4J2,
    KafkaJvm,
    KafkaNode,
    new_cluster_id,
    node_properties,
)
from streamdp.broker.kafka_runtime import java_executable, kafka_libs
from streamdp.broker.kafka_topics import KafkaTopics
from streamdp.broker.loopback import (
    LOOPBACK,
    BrokerLauncher,
    accepts_tcp,
    forget_at_exit,
    free_loopback_ports,
    log_tail,
    run_in_thread,
    signal_process,
    stop_at_exit,
    stop_process,
)
from streamdp.errors import BrokerError


class KafkaCluster(KafkaTopics, BrokerLauncher):
    """``nodes`` Apache Kafka nodes (each broker and controller) on 127.0.0.1, owned here.

    Use as a context manager or call :meth:`start` and :meth:`stop`/:meth:`close`.
    ``bootstrap`` is ``"127.0.0.1:P1,127.0.0.1:P2,..."`` for Kafka clients.

    Arguments:
        nodes: how many nodes (1 for a single broker; 3 for replication factor 3).
        log_path: the first node's log file; the others sit next to it (``broker-<id>.log``).
            ``None`` keeps every log in the cluster's temporary directory.
        start_timeout: seconds for the cluster (or one restarted node) to answer with every
            node registered.
        heap_mb: JVM heap per node.
        libs: directory of Kafka's jars; ``None`` resolves them with :func:`kafka_libs`.
        extra_properties: server properties added to (or overriding) the defaults.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        log_path: Path | None = None,
        start_timeout: float = 120.0,
        heap_mb: int = DEFAULT_HEAP_MB,
        libs: Path | None = None,
        extra_properties: Mapping[str, str] | None = None,
    ) -> None:
        if nodes < 1:
            raise BrokerError(f"a Kafka cluster needs at least 1 node, got nodes={nodes}")
        if start_timeout <= 0:
            raise BrokerError(f"start_timeout must be positive seconds, got {start_timeout!r}")
        if heap_mb < 128:
            raise BrokerError(f"heap_mb below 128 MiB cannot run a Kafka node, got {heap_mb}")
        self.node_count = nodes
        self.replication_factor = min(3, nodes)
        self.min_insync_replicas = min(2, nodes)
        self._start_timeout = start_timeout
        self._heap_mb = heap_mb
        self._libs = libs
        self._extra = dict(extra_properties or {})
        self._tmpdir = Path(tempfile.mkdtemp(prefix="streamdp-kafka-"))
        self.log_path = log_path if log_path is not None else self._tmpdir / "broker-0.log"
        self._nodes: list[KafkaNode] = []
        self._java = ""
        self._started = False

    # -- addresses -----------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's ``127.0.0.1:PORT``, comma-separated (clients need only one alive)."""
        if not self._nodes:
            raise BrokerError("the Kafka cluster is not started: call start() first")
        return ",".join(f"{LOOPBACK}:{node.port}" for node in self._nodes)

    @property
    def running(self) -> bool:
        """True while every node's JVM is alive."""
        return bool(self._nodes) and all(node.running for node in self._nodes)

    def node_running(self, index: int) -> bool:
        return self._node(index).running

    def node_pid(self, index: int) -> int | None:
        """The process id of node ``index``'s JVM while it runs (benchmarks read its CPU time)."""
        node = self._node(index)
        return node.process.pid if node.running and node.process is not None else None

    def _node(self, index: int) -> KafkaNode:
        if not 0 <= index < len(self._nodes):
            raise BrokerError(
                f"no Kafka node {index}: this cluster has nodes 0..{len(self._nodes) - 1}"
                if self._nodes
                else "the Kafka cluster is not started: call start() first"
            )
        return self._nodes[index]

    def _require_started(self) -> None:
        if not self._started:
            raise BrokerError("the Kafka cluster is not started: call start() first")

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Self:
        """Resolve the jars, format every node's storage, start the JVMs and wait until every
        node is registered. Raises :class:`KafkaUnavailableError` without Java or the jars, and
        :class:`BrokerError` with the log tails when a node dies or the cluster does not form."""
        if self._started:
            raise BrokerError("the Kafka cluster is already started; stop() it first")
        self._java = java_executable()
        jvm = self._jvm()
        ports = free_loopback_ports(2 * self.node_count)
        self._nodes = [
            KafkaNode(
                node_id=i,
                port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                directory=self._tmpdir / f"node-{i}",
            )
            for i in range(self.node_count)
        ]
        log4j = self._tmpdir / "log4j2.properties"
        log4j.write_text(LOG4J2)
        cluster_id = new_cluster_id()
        self._started = True
        stop_at_exit(self, timeout=5.0)
        try:
            for node in self._nodes:
                node.directory.mkdir(parents=True)
                node.properties_path.write_text(
                    node_properties(
                        node,
                        self._nodes,
                        replication_factor=self.replication_factor,
                        min_insync_replicas=self.min_insync_replicas,
                        extra=self._extra,
                    )
                )
                jvm.format_storage(node, cluster_id)
            for node in self._nodes:
                jvm.launch(node, self._node_log(node), log4j)
            self._wait_registered(set(range(self.node_count)))
        except BaseException:
            self.stop()
            raise
        return self

    def _jvm(self) -> KafkaJvm:
        libs = self._libs if self._libs is not None else kafka_libs()
        return KafkaJvm(self._java, self._heap_mb, libs)

    def _node_log(self, node: KafkaNode) -> Path:
        if node.node_id == 0:
            return self.log_path
        return self.log_path.with_name(f"{self.log_path.stem}-{node.node_id}{self.log_path.suffix}")

    def _wait_registered(self, node_ids: set[int]) -> None:
        """Wait until the cluster answers Metadata listing ``node_ids`` and a topic can be
        created (the controller is active)."""
        deadline = time.monotonic() + self._start_timeout
        last_problem = "no answer yet"
        while time.monotonic() < deadline:
            for node in self._nodes:
                if node.node_id in node_ids and not node.running:
                    code = node.process.poll() if node.process else None
                    raise BrokerError(
                        f"Kafka node {node.node_id} exited with code {code} while starting; "
                        f"{self._node_log(node)} ends with:\n{log_tail(self._node_log(node))}"
                    )
            waiting = [n for n in self._nodes if n.node_id in node_ids]
            if not all(accepts_tcp(n.port) for n in waiting):
                last_problem = "client listeners not open yet"
                time.sleep(0.25)
                continue
            try:
                brokers = run_in_thread(self._registered_brokers)
            except Exception as error:
                last_problem = f"{type(error).__name__}: {error}"
            else:
                if node_ids <= brokers:
                    return
                last_problem = f"registered nodes {sorted(brokers)}, waiting for {sorted(node_ids)}"
            time.sleep(0.25)
        tails = "\n".join(
            f"--- node {n.node_id} ({self._node_log(n)}):\n{log_tail(self._node_log(n), 10)}"
            for n in self._nodes
        )
        raise BrokerError(
            f"the Kafka cluster did not register nodes {sorted(node_ids)} within "
            f"{self._start_timeout} s ({last_problem}); raise start_timeout on a loaded "
            f"machine. Logs:\n{tails}"
        )

    async def _admin(self) -> Any:
        from aiokafka.admin import AIOKafkaAdminClient

        alive = ",".join(f"{LOOPBACK}:{n.port}" for n in self._nodes if n.running)
        admin = AIOKafkaAdminClient(
            bootstrap_servers=alive or self.bootstrap, request_timeout_ms=10_000
        )
        await admin.start()
        return admin

    async def _registered_brokers(self) -> set[int]:
        admin = await self._admin()
        try:
            cluster = await admin.describe_cluster()
        finally:
            await admin.close()
        return {int(b["node_id"]) for b in cluster["brokers"]}

    def stop_node(self, index: int, timeout: float = 30.0) -> None:
        """Stop one node cleanly (SIGTERM: controlled shutdown), SIGKILL after ``timeout`` s."""
        self._terminate(self._node(index), timeout)

    def kill_node(self, index: int) -> None:
        """SIGKILL one node's JVM (a crash: no controlled shutdown, no flush)."""
        node = self._node(index)
        if node.process is not None and node.process.poll() is None:
            signal_process(node.process, signal.SIGKILL, group=True)
            node.process.wait()
        node.close_log()

    def restart_node(self, index: int) -> None:
        """Start a stopped or killed node again on its ports and storage; return once the
        cluster lists it again (it may still be catching up: see wait_fully_replicated)."""
        node = self._node(index)
        if node.running:
            raise BrokerError(f"Kafka node {index} is running: stop_node/kill_node it first")
        self._jvm().launch(node, self._node_log(node), self._tmpdir / "log4j2.properties")
        self._wait_registered({node.node_id})

    @staticmethod
    def _terminate(node: KafkaNode, timeout: float) -> None:
        if node.process is not None:
            stop_process(node.process, timeout, group=True)
        node.close_log()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node: SIGTERM to all at once, wait up to ``timeout`` s, then SIGKILL.
        Idempotent."""
        for node in self._nodes:
            if node.process is not None:
                signal_process(node.process, signal.SIGTERM, group=True)
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            self._terminate(node, max(0.1, deadline - time.monotonic()))
        self._started = False
        forget_at_exit(self)

    def close(self) -> None:
        """Stop every node and delete the temporary directory (data; logs unless given)."""
        self.stop()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def log_tail(self, n_lines: int = 25) -> str:
        """The last ``n_lines`` of every node's log (for error messages)."""
        if not self._nodes:
            return log_tail(self.log_path, n_lines)
        return "\n".join(
            f"--- node {n.node_id}:\n{log_tail(self._node_log(n), n_lines)}" for n in self._nodes
        )
