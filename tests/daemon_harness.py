"""Helpers for the daemon's integration tests on the real embedded broker (not a test file).

Workers run as real subprocesses (``python -m streamdp worker``) so that they can be SIGKILLed.
Every test gets its own app id, topics and data directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streamdp.broker import EmbeddedBroker, KafkaCluster
from streamdp.broker.loopback import free_loopback_port
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.engine import Engine, EngineSpec, parse_spec
from streamdp.engine.periods import format_instant, parse_instant
from streamdp.errors import EXIT_INPUT_GAP
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import Line, generate, generated_end

SEED = 41
#: The privacy-unit key of replays that workers are compared with: any key gives the same
#: releases (admission never depends on the key, digests only name units), so the workers'
#: own key files need not match it.
UNIT_KEY = b"harness-unit-key-0123456789abcdef"
AnyBroker = EmbeddedBroker | KafkaCluster
#: The consumer group session timeout (``--session-timeout``, seconds) every harness worker has.
SESSION_TIMEOUT = 6.0


@dataclass
class Scenario:
    """Input lines per source topic (keyed by the source name) and the spec they follow.

    Time: the workers run on a frozen public clock at ``end`` (the end of the last generated
    period) and every stream's allowed lateness is ten years, so no period is ever due on the
    clock; periods are released by operator close records on the control topic, sent only
    once the worker has consumed the input before them (:func:`close_through`). Every record
    therefore arrives while its period is open, exactly as in :func:`replay_outputs`.
    """

    spec_text: str
    lines: dict[str, list[Line]] = field(default_factory=dict)
    end: float = 0.0

    @property
    def spec(self) -> EngineSpec:
        return parse_spec(self.spec_text)

    @property
    def clock(self) -> str:
        """The workers' ``--clock``."""
        return f"frozen:{format_instant(self.end)}"

    def cut_instant(self, cut: int) -> float:
        """An instant no good line at index >= ``cut`` of any topic is before: closing through
        it leaves every later line's period open."""
        times = [
            parse_instant(json.loads(line.text)["event_time"])
            for lines in self.lines.values()
            for line in lines[cut:]
            if line.expect is None
        ]
        return min((t for t in times if t is not None), default=self.end)


def make_scenario(
    periods: int = 40, rate: float = 6, bad_fraction: float = 0.0, *, suffix: str = ""
) -> Scenario:
    """Both seed scenarios in one spec; with ``suffix``, the input topics are renamed
    ``orders-<suffix>`` and ``admissions-<suffix>`` (one namespace per test)."""
    files = resources.files("streamdp").joinpath("examples")
    texts = {}
    for name, topic, renamed in (
        ("restaurant", "restaurant-orders", f"orders-{suffix}"),
        ("hospital", "hospital-admissions", f"admissions-{suffix}"),
    ):
        text = files.joinpath(f"{name}.toml").read_text("utf-8")
        if suffix:
            text = text.replace(f'topic = "{topic}"', f'topic = "{renamed}"')
        text = re.sub(r'allowed_lateness = "[^"]*"', 'allowed_lateness = "3650d"', text)
        texts[name] = text
    scenario = Scenario(texts["restaurant"] + "\n" + texts["hospital"])
    for name, text in texts.items():
        sub = parse_spec(text)
        source = next(iter(sub.sources.values()))
        scenario.lines[source.topic] = list(
            generate(name, periods, rate, seed=7, bad_fraction=bad_fraction, spec=sub)
        )
        scenario.end = max(scenario.end, generated_end(sub, periods))
    return scenario


def replay_outputs(
    scenario: Scenario, topics: OutputTopics, seed: int = SEED, *, cut: int | None = None
) -> dict[str, dict[str, str]]:
    """What an engine given the same records publishes: topic -> key -> final value. With
    ``cut``, every stream is closed through :meth:`Scenario.cut_instant` after the lines before
    ``cut`` (as :func:`close_through` does on a live worker); in the end through ``end``."""
    return replay_outputs_through_cuts(scenario, topics, seed, cuts=[] if cut is None else [cut])


def replay_outputs_through_cuts(
    scenario: Scenario, topics: OutputTopics, seed: int = SEED, *, cuts: Sequence[int]
) -> dict[str, dict[str, str]]:
    """What an engine given the same records publishes, with several cuts (increasing line
    indices, possibly none): after the lines before each cut, every stream is closed through
    that cut's :meth:`Scenario.cut_instant` (as :func:`close_through` does on a live worker,
    once per cut); in the end through ``end``."""
    if list(cuts) != sorted(set(cuts)) or any(c <= 0 for c in cuts):
        raise ValueError(f"cuts must be distinct positive line indices in order, got {cuts!r}")
    engine = Engine(scenario.spec, sampler=InsecureSeededSampler(seed), unit_key=UNIT_KEY)
    records = list(engine.advance_clock(scenario.end))
    out: dict[str, dict[str, str]] = {topics.releases: {}, topics.consistent: {}}
    stops: list[int | None] = [*cuts, None]
    for start, stop in zip([0, *cuts], stops, strict=True):
        for topic, lines in scenario.lines.items():
            for offset, line in enumerate(lines[start:stop], start=start):
                engine.ingest(line.text.encode(), source_topic=topic, partition=0, offset=offset)
        through = scenario.end if stop is None else scenario.cut_instant(stop)
        for stream in scenario.spec.streams:
            records += engine.close(stream, through)
    for record in records:
        out[topics.for_record(record)][record.key] = record.to_json()
    return out


def close_records(
    scenario: Scenario, topics: OutputTopics, through: float
) -> list[tuple[str, bytes, bytes]]:
    """Operator close records for every stream, keyed by the stream's source."""
    spec = scenario.spec
    return [
        (
            topics.control,
            s.source.encode(),
            json.dumps(
                {
                    "type": "control",
                    "action": "close",
                    "stream": name,
                    "through": format_instant(through),
                }
            ).encode(),
        )
        for name, s in spec.streams.items()
    ]


def wait_consumed(
    broker: AnyBroker,
    group: str,
    counts: dict[str, int],
    partitions: int,
    timeout: float = 120.0,
) -> None:
    """Wait until the group's committed offsets cover ``counts[topic]`` records per input
    topic (every record of a topic is keyed alike, so they sit on one partition)."""
    deadline = time.monotonic() + timeout
    while True:
        done = True
        reached: dict[str, Any] = {}
        for topic, total in counts.items():
            committed = committed_offsets(broker, group, topic, range(partitions))
            reached[topic] = committed
            if sum(o or 0 for o in committed.values()) < total:
                done = False
        if done:
            return
        assert time.monotonic() < deadline, (
            f"input not consumed: expected {counts}, committed offsets {reached}"
        )
        time.sleep(0.5)


def close_through(
    broker: AnyBroker,
    scenario: Scenario,
    topics: OutputTopics,
    group: str,
    *,
    cut: int | None,
    partitions: int,
    timeout: float = 120.0,
) -> None:
    """Wait until the worker(s) of ``group`` consumed every line before ``cut`` (all lines
    when None; at most ``timeout`` seconds), then send the operator's close records through
    the matching instant."""
    counts = {t: len(lines) if cut is None else cut for t, lines in scenario.lines.items()}
    wait_consumed(broker, group, counts, partitions, timeout)
    through = scenario.end if cut is None else scenario.cut_instant(cut)
    produce(broker, close_records(scenario, topics, through))


def create_topics(
    broker: AnyBroker,
    scenario: Scenario,
    config: Path,
    partitions: int,
    *,
    app_id: str,
    topics: OutputTopics,
) -> None:
    settings = DaemonSettings(
        config=config,
        bootstrap=broker.bootstrap,
        partitions=partitions,
        app_id=app_id,
        topics=topics,
    )
    broker.create_topics(required_topics(scenario.spec, settings))


_WORKERS: weakref.WeakSet[Worker] = weakref.WeakSet()


def running_workers() -> list[Worker]:
    """The harness's workers whose process still runs (for failure reports: conftest.py)."""
    return [w for w in list(_WORKERS) if w.process.poll() is None]


class Worker:
    """One ``streamdp worker``, supervised like production: a worker that exits with status 75
    (input gap or stall: "restart me") is restarted after the group session timeout."""

    RESTART_DELAY = SESSION_TIMEOUT + 1.0  # > the session timeout given to the worker

    def __init__(
        self,
        broker: AnyBroker,
        config: Path,
        *,
        app_id: str,
        partitions: int,
        data_dir: Path,
        log_path: Path,
        seed: int | None = SEED,
        namespace: str = "streamdp",
        supervise: bool = True,
        input_path: str = "batch",
        extra_args: Sequence[str] = (),
        clock: str = "wall",
        program: Sequence[str] = ("-m", "streamdp"),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_loopback_port()
        self.log_path = log_path
        self._env = None if env is None else {**os.environ, **env}
        self.args = [
            sys.executable, *program, "worker",
            "--config", str(config),
            "--bootstrap", broker.bootstrap,
            "--app-id", app_id,
            "--partitions", str(partitions),
            "--web-port", str(self.port),
            "--data-dir", str(data_dir),
            "--session-timeout", f"{SESSION_TIMEOUT:g}",
            "--stall-exit", "12",
            "--topic-namespace", namespace,
            "--input-path", input_path,
            "--clock", clock,
        ]  # fmt: skip
        if seed is not None:
            self.args += ["--insecure-seed", str(seed)]
        self.args += list(extra_args)
        if isinstance(broker, EmbeddedBroker):  # Tansu's ListOffsets defect (dev-broker-notes)
            self.args.append("--single-record-batches")
        self._log = log_path.open("ab")
        _WORKERS.add(self)
        self.restarts = 0
        #: ``time.monotonic()`` when :meth:`kill` SIGKILLed the process (None: never killed)
        self.killed_at: float | None = None
        self._supervising = supervise
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self._env
        )
        self._thread = threading.Thread(target=self._supervise, daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        while self._supervising:
            code = self.process.poll()
            if code == EXIT_INPUT_GAP:
                time.sleep(self.RESTART_DELAY)
                with self._lock:
                    if not self._supervising:
                        return
                    self.restarts += 1
                    self.process = subprocess.Popen(
                        self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self._env
                    )
            elif code is not None:
                return
            time.sleep(0.2)

    def _stop_supervising(self) -> None:
        with self._lock:
            self._supervising = False

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=2) as r:
                return dict(json.loads(r.read()))
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None and code != EXIT_INPUT_GAP:  # 75: being restarted
                raise AssertionError(f"worker exited early:\n{self.log_tail()}")
            status = self.status()
            if status is not None and status.get("ready"):
                return
            time.sleep(0.3)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        self._stop_supervising()
        self.process.send_signal(signal.SIGKILL)
        self.killed_at = time.monotonic()
        self.process.wait(10)
        self._log.close()

    def stop_where_it_is(self, timeout: float = 30.0) -> int:
        """Freeze the worker (SIGSTOP), queue a SIGTERM and let it resume: the graceful stop
        starts exactly where it was frozen, with no time to read on between a test's
        observation and the signal. Returns the exit status."""
        self._stop_supervising()
        self.process.send_signal(signal.SIGSTOP)
        self.process.send_signal(signal.SIGTERM)
        self.process.send_signal(signal.SIGCONT)
        return self.stop(timeout)

    def stop(self, timeout: float = 30.0) -> int:
        self._stop_supervising()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        return int(self.process.returncode)

    def diagnosis(self, lines: int = 80) -> str:
        """What a test that timed out waiting for this worker should show: its exit status and
        /status, its log's end, and the worker's diagnostic dump (SIGUSR1: where each asyncio
        task waits, each input partition as the stall watchdog sees it)."""
        running = self.process.poll() is None
        status = self.status() if running else None
        head = self.log_tail(lines)
        dump = "(the worker is not running)"
        if running:
            if not self._log.closed:
                self._log.flush()
            before = self.log_path.stat().st_size
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(2.0)  # the dump is written by the worker's own loop
            with self.log_path.open("rb") as log:
                log.seek(before)
                dump = log.read().decode(errors="replace") or "(no dump within 2 s)"
        return (
            f"worker exit status: {self.process.poll()}, restarts: {self.restarts}\n"
            f"/status: {json.dumps(status, sort_keys=True)}\n{head}\n{dump}"
        )

    def log_tail(self, n: int = 60) -> str:
        if not self._log.closed:
            self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])


def produce(
    broker: AnyBroker,
    records: Iterable[tuple[str, bytes, bytes]],
    *,
    compression: str | None = None,
    transactional_id: str | None = None,
) -> None:
    """Send (topic, key, value) records in order and wait for every acknowledgement; the
    producer compresses its batches with ``compression`` (gzip, snappy, lz4, zstd) if given,
    and with ``transactional_id`` sends them all in one committed transaction."""

    async def go() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            linger_ms=5,
            acks="all",
            compression_type=compression,
            transactional_id=transactional_id,
        )
        await producer.start()
        try:
            if transactional_id is None:
                futures = [await producer.send(t, v, key=k) for t, k, v in records]
                await asyncio.gather(*futures)
                return
            async with producer.transaction():
                futures = [await producer.send(t, v, key=k) for t, k, v in records]
                await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(go())


def lines_as_records(
    scenario: Scenario, *, start: int = 0, stop: int | None = None
) -> list[tuple[str, bytes, bytes]]:
    spec = scenario.spec
    out = []
    for topic, lines in scenario.lines.items():
        source = spec.source_of_topic(topic)
        assert source is not None
        out.extend((topic, source.name.encode(), line.text.encode()) for line in lines[start:stop])
    return out


def collect(
    broker: AnyBroker,
    topics: list[str],
    done: Callable[[dict[str, dict[str, list[str]]]], bool],
    *,
    timeout: float = 90.0,
    timestamps: dict[str, list[int]] | None = None,
) -> dict[str, dict[str, list[str]]]:
    """Read ``topics`` from the beginning until ``done(seen)``: topic -> key -> every value.
    ``timestamps``: filled with topic -> the Kafka timestamp (ms) of every record read."""

    async def go() -> dict[str, dict[str, list[str]]]:
        consumer = AIOKafkaConsumer(
            *topics, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
            group_id=None, enable_auto_commit=False,
        )  # fmt: skip
        await consumer.start()
        seen: dict[str, dict[str, list[str]]] = {t: {} for t in topics}
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and not done(seen):
                batches = await consumer.getmany(timeout_ms=500)
                for tp, messages in batches.items():
                    for m in messages:
                        key = m.key.decode() if m.key else ""
                        value = m.value.decode() if m.value is not None else ""
                        seen[tp.topic].setdefault(key, []).append(value)
                        if timestamps is not None:
                            timestamps.setdefault(tp.topic, []).append(m.timestamp)
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(go())


def has_all(
    expected: dict[str, dict[str, str]],
) -> Callable[[dict[str, dict[str, list[str]]]], bool]:
    """Done when every expected key has arrived with its final value (latest revision)."""

    def done(seen: dict[str, dict[str, list[str]]]) -> bool:
        for topic, keys in expected.items():
            got = seen.get(topic, {})
            for key, value in keys.items():
                if value not in got.get(key, ()):
                    return False
        return True

    return done


def env_without_proxies() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


def record_counts(broker: AnyBroker, topic: str, total: int) -> dict[int, int]:
    """How many records each partition of ``topic`` holds, read from the beginning until
    ``total`` records were seen (records counted, not ListOffsets: see docs/dev-broker-notes)."""

    async def go() -> dict[int, int]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
            group_id=None, enable_auto_commit=False,
        )  # fmt: skip
        await consumer.start()
        ends: dict[int, int] = {}
        seen = 0
        deadline = time.monotonic() + 60
        try:
            while seen < total and time.monotonic() < deadline:
                for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                    seen += len(messages)
                    ends[tp.partition] = max(ends.get(tp.partition, 0), messages[-1].offset + 1)
        finally:
            await consumer.stop()
        return ends

    return asyncio.run(go())


def committed_offsets(
    broker: AnyBroker, group: str, topic: str, partitions: Iterable[int]
) -> dict[int, int | None]:
    """The consumer group's committed offsets for ``topic`` (asked of the group coordinator
    without joining the group)."""
    from aiokafka import TopicPartition

    async def go() -> dict[int, int | None]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            return {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}
        finally:
            await consumer.stop()

    return asyncio.run(go())


def group_members(broker: AnyBroker, group: str) -> tuple[str, list[str]]:
    """The consumer group's state and member ids now, by the group coordinator's DescribeGroups
    answer (state "Dead" and no member for a group the coordinator does not know)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def go() -> tuple[str, list[str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            answers = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        # DescribeGroupsResponse: groups = [(error_code, group_id, state, protocol_type,
        # protocol, members = [(member_id, client_id, ...)], ...)]
        for answer in answers:
            for g in answer.groups:
                if g[1] == group:
                    return str(g[2]), [str(m[0]) for m in g[5]]
        return "Dead", []

    return asyncio.run(go())


def group_member_count(broker: AnyBroker, group: str) -> int:
    """How many members the consumer group has now, by the group coordinator's DescribeGroups
    answer (on Kafka 0 once a killed worker's session has expired: see wait_session_expired)."""
    return len(group_members(broker, group)[1])


def wait_group_empty(broker: AnyBroker, group: str, timeout: float = 60.0) -> None:
    """Wait until the consumer group has no member (a killed worker's session expired), so a
    restarted worker joins an empty group: one rebalance, not two."""
    deadline = time.monotonic() + timeout
    while (members := group_member_count(broker, group)) != 0:
        assert time.monotonic() < deadline, f"group {group!r} still has {members} member(s)"
        time.sleep(0.25)


def wait_session_expired(
    broker: AnyBroker, group: str, killed: Worker, timeout: float = 60.0
) -> None:
    """Wait until the session of ``killed`` (a worker SIGKILLed by :meth:`Worker.kill`) in the
    consumer group has expired, so that a worker started now joins alone: one rebalance, not
    two (docs/dev-broker-notes.md, finding 4).

    Apache Kafka expels the dead member after the session timeout on its own: wait until the
    group is empty (:func:`wait_group_empty`). Tansu 0.6.0 does not: measured, DescribeGroups
    keeps answering "Stable" with the dead member for as long as no other member talks to the
    group (still after 16 s with a 6 s session timeout). It drops the dead member only while
    handling a JoinGroup that arrives after the member's session timeout (a member joining
    earlier is kept waiting in the rebalance until the timeout is reached). So on Tansu wait out
    the session timeout from the kill (:attr:`Worker.RESTART_DELAY`, as a supervisor does),
    and after the restart check with :func:`wait_sole_owner` that the dead member is gone."""
    assert killed.killed_at is not None, "wait_session_expired() is for a worker kill()ed"
    if isinstance(broker, EmbeddedBroker):
        assert timeout >= Worker.RESTART_DELAY, f"{timeout} s is within the session timeout"
        time.sleep(max(0.0, killed.killed_at + Worker.RESTART_DELAY - time.monotonic()))
        return
    wait_group_empty(broker, group, timeout)


def wait_sole_owner(
    broker: AnyBroker,
    group: str,
    worker: Worker,
    sources: Iterable[str],
    *,
    gone: Iterable[str] = (),
    timeout: float = 90.0,
) -> None:
    """Wait until ``worker`` is the consumer group's only member, the group is "Stable", no
    member id of ``gone`` (a killed worker's) is listed any more, and ``worker`` owns every
    source in ``sources`` (its /status ``sources_owned``): the group has settled on the
    restarted worker alone."""
    gone = set(gone)
    wanted = sorted(set(sources))
    deadline = time.monotonic() + timeout
    while True:
        state, members = group_members(broker, group)
        owned = (worker.status() or {}).get("sources_owned")
        settled = state == "Stable" and len(members) == 1 and not gone & set(members)
        if settled and owned == wanted:
            return
        code = worker.process.poll()
        assert code is None or code == EXIT_INPUT_GAP, (
            f"worker exited with {code} before owning its sources:\n{worker.log_tail()}"
        )
        assert time.monotonic() < deadline, (
            f"group {group!r} not settled on the restarted worker after {timeout} s: state "
            f"{state!r}, members {members} (killed: {sorted(gone)}), worker owns {owned}, "
            f"wanted {wanted}"
        )
        time.sleep(0.5)
