"""Apache Kafka (KRaft) on loopback for the tests, the benchmarks and ``./run kafka``.

:class:`KafkaCluster` runs ``nodes`` JVMs, each a combined broker and controller (KRaft, no
ZooKeeper), on ``127.0.0.1`` with free ports; :class:`KafkaBroker` is the single-node case.
Topics get replication factor ``min(3, nodes)`` and ``min.insync.replicas`` ``min(2, nodes)``,
the settings of ``deploy/``.

The jars come from Maven Central: ``streamdp/broker/kafka_jars/pom.xml`` names
``org.apache.kafka:kafka_2.13`` (:data:`KAFKA_VERSION`) and a log binding, and
:func:`kafka_libs` copies them with their runtime dependencies into a cache directory once
(``mvn dependency:copy-dependencies``), then reuses it. Each node's log directory is formatted
with Kafka's storage tool (``kafka.tools.StorageTool``), then the node runs
``java -cp '<libs>/*' kafka.Kafka server.properties``.

No JVM outlives its owner: :meth:`KafkaCluster.stop` sends SIGTERM to each node's process group,
waits, then SIGKILLs; an ``atexit`` hook stops every cluster still running; and on Linux each
JVM asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``).

Faults for tests: :meth:`KafkaCluster.kill_node` (SIGKILL), :meth:`KafkaCluster.stop_node`
(clean), :meth:`KafkaCluster.restart_node`, :meth:`KafkaCluster.leader_of` and
:meth:`KafkaCluster.wait_fully_replicated`.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import fcntl
import hashlib
import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar

from streamdp.broker.tansu import LOOPBACK, _die_with_parent, _log_tail, free_loopback_port
from streamdp.errors import BrokerError

#: The Apache Kafka release the tests, the benchmarks and deploy/ use.
KAFKA_VERSION = "4.4.0"
#: Per-node JVM heap: the test machines have 2 cores and little memory to spare.
DEFAULT_HEAP_MB = 512
_TOPIC_ALREADY_EXISTS = 36
_LIVE: weakref.WeakSet[KafkaCluster] = weakref.WeakSet()
_T = TypeVar("_T")


class KafkaUnavailableError(BrokerError):
    """Apache Kafka cannot run here: Java or Maven is missing, or the jars do not resolve."""


def java_executable() -> str:
    """The ``java`` to run Kafka with: ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailableError(
            "Apache Kafka needs a Java runtime (17 or newer) and none was found: no `java` on "
            "PATH and no JAVA_HOME. Install one (Debian/Ubuntu: `apt-get install "
            "openjdk-17-jre-headless`) or run the broker tests on Tansu"
        )
    return found


def _pom() -> Path:
    return Path(str(importlib.resources.files("streamdp.broker").joinpath("kafka_jars/pom.xml")))


def default_cache_dir() -> Path:
    """Where the jars go: ``$KAFKA_JAR_CACHE``, else ``.cache/kafka-<version>`` in a source
    checkout (next to ``pyproject.toml``), else ``~/.cache/streamdp/kafka-<version>``."""
    override = os.environ.get("KAFKA_JAR_CACHE")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "streamdp").is_dir():
        return checkout / ".cache" / f"kafka-{KAFKA_VERSION}"
    return Path.home() / ".cache" / "streamdp" / f"kafka-{KAFKA_VERSION}"


def kafka_libs(cache_dir: Path | None = None) -> Path:
    """The directory holding Kafka's jars, resolved with Maven on first use.

    A stamp file records the hash of the pom the jars came from, so a changed pom resolves
    again. Concurrent callers (two test sessions, a benchmark) wait on a file lock instead of
    resolving twice. Raises :class:`KafkaUnavailableError` when Maven is missing or fails.
    """
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    libs = cache / "libs"
    pom = _pom()
    want = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = cache / "resolved.sha256"
    if stamp.is_file() and stamp.read_text().strip() == want:
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == want:
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaUnavailableError(
                f"Apache Kafka {KAFKA_VERSION}'s jars are not in {libs} and resolving them needs "
                "Maven, which is not on PATH. Install it (Debian/Ubuntu: `apt-get install maven`) "
                "or point KAFKA_JAR_CACHE at a directory whose libs/ holds the jars"
            )
        shutil.rmtree(libs, ignore_errors=True)
        log = cache / "mvn.log"
        command = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
        ]  # fmt: skip
        with log.open("wb") as out:
            done = subprocess.run(  # noqa: S603 - fixed argv
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0 or not any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
            raise KafkaUnavailableError(
                f"Maven could not resolve Apache Kafka {KAFKA_VERSION} from {pom} (exit "
                f"{done.returncode}); {log} ends with:\n{_log_tail(log)}"
            )
        stamp.write_text(want + "\n")
    return libs


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


_LOG4J2 = """\
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


@dataclass
class _Node:
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


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run_in_thread(factory: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine on its own event loop in a helper thread (safe inside a running loop)."""
    results: list[_T] = []
    errors: list[BaseException] = []

    def work() -> None:
        async def wrapped() -> _T:
            return await factory()

        try:
            results.append(asyncio.run(wrapped()))
        except BaseException as error:  # re-raised in the calling thread
            errors.append(error)

    thread = threading.Thread(target=work, name="streamdp-kafka-admin")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


class KafkaCluster:
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
        self._nodes: list[_Node] = []
        self._java = ""
        self._started = False

    # -- addresses -----------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's ``127.0.0.1:PORT``, comma-separated (clients need only one alive)."""
        if not self._nodes:
            raise BrokerError("the Kafka cluster is not started: call start() first")
        return ",".join(f"{LOOPBACK}:{node.port}" for node in self._nodes)

    def node_bootstrap(self, index: int) -> str:
        """``127.0.0.1:PORT`` of one node."""
        return f"{LOOPBACK}:{self._node(index).port}"

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

    def _node(self, index: int) -> _Node:
        if not 0 <= index < len(self._nodes):
            raise BrokerError(
                f"no Kafka node {index}: this cluster has nodes 0..{len(self._nodes) - 1}"
                if self._nodes
                else "the Kafka cluster is not started: call start() first"
            )
        return self._nodes[index]

    def node_log_path(self, index: int) -> Path:
        return self._node(index).log_path

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> Self:
        """Resolve the jars, format every node's storage, start the JVMs and wait until every
        node is registered. Raises :class:`KafkaUnavailableError` without Java or the jars, and
        :class:`BrokerError` with the log tails when a node dies or the cluster does not form."""
        if self._started:
            raise BrokerError("the Kafka cluster is already started; stop() it first")
        self._java = java_executable()
        libs = self._libs if self._libs is not None else kafka_libs()
        classpath = f"{libs}/*"
        ports = self._free_ports(2 * self.node_count)
        self._nodes = [
            _Node(
                node_id=i,
                port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                directory=self._tmpdir / f"node-{i}",
            )
            for i in range(self.node_count)
        ]
        log4j = self._tmpdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        cluster_id = new_cluster_id()
        self._started = True
        _LIVE.add(self)
        try:
            for node in self._nodes:
                node.directory.mkdir(parents=True)
                node.properties_path.write_text(self._properties(node))
                self._format(node, classpath, cluster_id)
            for node in self._nodes:
                self._launch(node, classpath, log4j)
            self._wait_registered(set(range(self.node_count)))
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _free_ports(count: int) -> list[int]:
        ports: list[int] = []
        while len(ports) < count:
            port = free_loopback_port()
            if port not in ports:
                ports.append(port)
        return ports

    def _properties(self, node: _Node) -> str:
        voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self._nodes)
        replicas = str(self.replication_factor)
        min_isr = str(self.min_insync_replicas)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
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
        props.update(self._extra)
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _jvm(self, classpath: str, *extra: str) -> list[str]:
        return [
            self._java,
            f"-Xmx{self._heap_mb}m",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            "-cp",
            classpath,
            *extra,
        ]

    def _format(self, node: _Node, classpath: str, cluster_id: str) -> None:
        command = [
            *self._jvm(classpath),
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

    def _node_log(self, node: _Node) -> Path:
        if node.node_id == 0:
            return self.log_path
        return self.log_path.with_name(f"{self.log_path.stem}-{node.node_id}{self.log_path.suffix}")

    def _launch(self, node: _Node, classpath: str, log4j: Path) -> None:
        log_path = self._node_log(node)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # the node's directory links to its log so that node_log_path() is one place to look
        link = node.log_path
        if link != log_path and not link.exists():
            link.symlink_to(log_path)
        node.log = log_path.open("ab")
        command = [
            *self._jvm(classpath, f"-Dlog4j2.configurationFile={log4j}"),
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
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 - only calls prctl
            )
        except OSError as error:
            raise KafkaUnavailableError(f"cannot execute {self._java}: {error}") from error

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
                        f"{self._node_log(node)} ends with:\n{_log_tail(self._node_log(node))}"
                    )
            waiting = [n for n in self._nodes if n.node_id in node_ids]
            if not all(_accepts_tcp(n.port) for n in waiting):
                last_problem = "client listeners not open yet"
                time.sleep(0.25)
                continue
            try:
                brokers = _run_in_thread(self._registered_brokers)
            except Exception as error:
                last_problem = f"{type(error).__name__}: {error}"
            else:
                if node_ids <= brokers:
                    return
                last_problem = f"registered nodes {sorted(brokers)}, waiting for {sorted(node_ids)}"
            time.sleep(0.25)
        tails = "\n".join(
            f"--- node {n.node_id} ({self._node_log(n)}):\n{_log_tail(self._node_log(n), 10)}"
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
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait()
        self._close_log(node)

    def restart_node(self, index: int) -> None:
        """Start a stopped or killed node again on its ports and storage; return once the
        cluster lists it again (it may still be catching up: see wait_fully_replicated)."""
        node = self._node(index)
        if node.running:
            raise BrokerError(f"Kafka node {index} is running: stop_node/kill_node it first")
        libs = self._libs if self._libs is not None else kafka_libs()
        self._launch(node, f"{libs}/*", self._tmpdir / "log4j2.properties")
        self._wait_registered({node.node_id})

    def _terminate(self, node: _Node, timeout: float) -> None:
        process = node.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._close_log(node)

    @staticmethod
    def _close_log(node: _Node) -> None:
        if node.log is not None:
            node.log.close()
            node.log = None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node: SIGTERM to all at once, wait up to ``timeout`` s, then SIGKILL.
        Idempotent."""
        for node in self._nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            self._terminate(node, max(0.1, deadline - time.monotonic()))
        self._started = False
        _LIVE.discard(self)

    def close(self) -> None:
        """Stop every node and delete the temporary directory (data; logs unless given)."""
        self.stop()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def log_tail(self, n_lines: int = 25) -> str:
        """The last ``n_lines`` of every node's log (for error messages)."""
        if not self._nodes:
            return _log_tail(self.log_path, n_lines)
        return "\n".join(
            f"--- node {n.node_id}:\n{_log_tail(self._node_log(n), n_lines)}" for n in self._nodes
        )

    # -- topics and metadata -------------------------------------------------------------------

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

        bad = {name: n for name, n in topics.items() if not name or n < 1}
        if bad:
            raise BrokerError(f"topics need a name and >= 1 partition, got {bad}")
        configs = config or {}
        placed = leaders or {}
        unknown = (set(configs) | set(placed)) - set(topics)
        if unknown:
            raise BrokerError(
                f"config or leaders given for topics not being created: {sorted(unknown)}"
            )
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
            failures: list[str] = []
            for entry in response.topic_errors:
                name, code = entry[0], entry[1]
                if code == 0 or (code == _TOPIC_ALREADY_EXISTS and exist_ok):
                    continue
                message = entry[2] if len(entry) > 2 else None
                failures.append(f"{name!r}: Kafka error {code} ({message})")
            if failures:
                raise BrokerError(
                    "the Kafka cluster refused to create topics: "
                    + "; ".join(failures)
                    + " (use exist_ok=True to accept existing topics, or pick new names)"
                )
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
        if not self._started:
            raise BrokerError("the Kafka cluster is not started: call start() first")
        _run_in_thread(
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

        return _run_in_thread(go)

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


def kafka_available() -> str | None:
    """``None`` when Apache Kafka can run here, else why not (for a loud test skip)."""
    try:
        java_executable()
        kafka_libs()
    except KafkaUnavailableError as error:
        return str(error)
    return None


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.stop(timeout=5.0)


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
