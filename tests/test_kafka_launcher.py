"""The Apache Kafka launcher (streamdp.broker.kafka): clear errors, no orphan JVMs, topics.

What these tests prove:
- without ``java`` (or without ``mvn`` while the jars are not resolved) starting Kafka raises
  :class:`KafkaUnavailableError` naming what is missing and how to install it;
- the session broker is a single KRaft node that creates topics with every partition led,
  refuses an existing topic unless asked, and round-trips records;
- a JVM never outlives its owner: ``close()`` leaves no process, and a SIGKILLed owner takes
  its JVM with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import kafka_or_skip

from streamdp.broker import KafkaBroker, KafkaUnavailableError, kafka_node
from streamdp.broker.kafka_runtime import java_executable, kafka_libs
from streamdp.errors import BrokerError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage tool reads an id starting with "-" as an option and refuses to format (a CI
    run lost its 3-node cluster to one): such a draw is drawn again."""
    import uuid

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kafka_node.uuid, "uuid4", lambda: next(draws))
    assert kafka_node.base64.urlsafe_b64encode(b"\xf8").startswith(b"-")  # the bad draw is bad
    cluster_id = kafka_node.new_cluster_id()
    assert cluster_id == "AQEBAQEBAQEBAQEBAQEBAQ"
    assert len(cluster_id) == 22


def test_no_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(KafkaUnavailableError, match="openjdk-17-jre-headless"):
        java_executable()
    broker = KafkaBroker()
    with pytest.raises(KafkaUnavailableError, match="Java runtime"):
        broker.start()
    broker.close()


def test_no_maven_without_resolved_jars_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KafkaUnavailableError, match="apt-get install maven"):
        kafka_libs(tmp_path / "empty-cache")


def test_the_session_broker_creates_topics_and_round_trips_records(
    kafka_broker: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = unique_name("roundtrip")
    kafka_broker.create_topics({topic: 3})
    assert [p["partition"] for p in kafka_broker.partitions(topic)] == [0, 1, 2]
    assert all(p["leader"] == 0 for p in kafka_broker.partitions(topic))
    with pytest.raises(BrokerError, match="error 36"):
        kafka_broker.create_topics({topic: 3})
    kafka_broker.create_topics({topic: 3}, exist_ok=True)

    async def go() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k", partition=1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 5 and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in messages]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(go()) == [b"v%d" % i for i in range(5)]


@pytest.mark.slow
def test_no_jvm_outlives_close_or_a_killed_owner(tmp_path: Path) -> None:
    kafka_or_skip()
    broker = KafkaBroker(log_path=tmp_path / "own.log").start()
    pid = broker._nodes[0].process.pid  # type: ignore[union-attr]
    assert _alive(pid)
    broker.close()
    assert not _alive(pid)

    owner = subprocess.Popen(
        [
            sys.executable, "-c",
            (
                "import sys, time\n"
                "from streamdp.broker import KafkaBroker\n"
                "b = KafkaBroker().start()\n"
                "print(b._nodes[0].process.pid, flush=True)\n"
                "time.sleep(600)\n"
            ),
        ],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert owner.stdout is not None
    with owner.stdout:
        jvm = int(owner.stdout.readline())
    assert _alive(jvm)
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    deadline = time.monotonic() + 20
    while _alive(jvm) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphan = _alive(jvm)
    if orphan:  # never leave it running, then fail
        os.killpg(jvm, signal.SIGKILL)
    assert not orphan, f"the JVM {jvm} outlived its SIGKILLed owner"
