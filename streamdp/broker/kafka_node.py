"""One Apache Kafka KRaft node on 127.0.0.1: its configuration, its storage and its JVM.

A node is a combined broker and controller (no ZooKeeper) with a client and a controller
listener on loopback. :func:`node_properties` writes its ``server.properties`` (the settings of
``deploy/``, sized for 2 shared cores); :meth:`KafkaJvm.format_storage` formats its log
directory with Kafka's storage tool (``kafka.tools.StorageTool``); :meth:`KafkaJvm.launch`
runs ``java -cp '<libs>/*' kafka.Kafka server.properties`` in its own process group, asking
Linux to SIGKILL it when its parent dies.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from streamdp.broker.kafka_runtime import KafkaUnavailableError
from streamdp.broker.loopback import LOOPBACK, die_with_parent
from streamdp.errors import BrokerError

#: Per-node JVM heap: the test machines have 2 cores and little memory to spare.
DEFAULT_HEAP_MB = 512

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.quiet.name = org.apache.kafka.clients
logger.quiet.level = WARN
"""


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters),
    never starting with "-": the storage tool would read such an id as an option and refuse to
    format (one id in 64 did; Kafka's own generator draws again too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class KafkaNode:
    """One node's identity, ports and directory, and its JVM and log file while it runs."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def close_log(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def node_properties(
    node: KafkaNode,
    voters: Sequence[KafkaNode],
    *,
    replication_factor: int,
    min_insync_replicas: int,
    extra: Mapping[str, str],
) -> str:
    """``node``'s ``server.properties`` in a cluster whose controller quorum is ``voters``;
    ``extra`` adds to (or overrides) the defaults."""
    quorum = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in voters)
    replicas = str(replication_factor)
    min_isr = str(min_insync_replicas)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": quorum,
        "listeners": f"PLAINTEXT://{LOOPBACK}:{node.port},CONTROLLER://{LOOPBACK}:"
        f"{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.directory / "data"),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        # a dead node is fenced (its partitions get new leaders) after this long
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
        "replica.lag.time.max.ms": "10000",
        "unclean.leader.election.enable": "false",
        # 2 shared cores: few threads per node
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.replica.fetchers": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "controlled.shutdown.enable": "true",
    }
    props.update(extra)
    return "".join(f"{key}={value}\n" for key, value in props.items())


@dataclass(frozen=True)
class KafkaJvm:
    """How to run Kafka's classes: the ``java`` executable, the heap per node, the jars."""

    java: str
    heap_mb: int
    libs: Path

    def command(self, *extra: str) -> list[str]:
        return [
            self.java,
            f"-Xmx{self.heap_mb}m",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            "-cp",
            f"{self.libs}/*",
            *extra,
        ]

    def format_storage(self, node: KafkaNode, cluster_id: str) -> None:
        """Format ``node``'s log directory for ``cluster_id`` (already formatted is fine)."""
        command = [
            *self.command(),
            "kafka.tools.StorageTool", "format",
            "--cluster-id", cluster_id,
            "--config", str(node.properties_path),
            "--ignore-formatted",
        ]  # fmt: skip
        done = subprocess.run(  # noqa: S603 - fixed argv
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            raise BrokerError(
                f"Kafka's storage tool could not format {node.directory} for node "
                f"{node.node_id} (exit {done.returncode}):\n{output}"
            )

    def launch(self, node: KafkaNode, log_path: Path, log4j: Path) -> None:
        """Start ``node``'s JVM, its output appended to ``log_path`` (linked from the node's
        directory), in a process group of its own."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # the node's directory links to its log, so that the node's log_path is one place to look
        link = node.log_path
        if link != log_path and not link.exists():
            link.symlink_to(log_path)
        node.log = log_path.open("ab")
        command = [
            *self.command(f"-Dlog4j2.configurationFile={log4j}"),
            "kafka.Kafka",
            str(node.properties_path),
        ]
        try:
            node.process = subprocess.Popen(  # noqa: S603 - fixed argv
                command,
                stdin=subprocess.DEVNULL,
                stdout=node.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() signals the group
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
            )
        except OSError as error:
            raise KafkaUnavailableError(f"cannot execute {self.java}: {error}") from error
