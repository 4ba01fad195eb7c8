"""A worker refuses a source whose stored state is behind its input group's commits, on Kafka:
behind their offsets, or behind the periods closed they witness.

The in-process checks are in tests/test_state_resume.py; this one proves the worker reads the
group's committed offsets where it loads a source (faust-streaming learns them when the
partition is assigned, before the first tick that could close a period): a worker releases and
commits, stops, its source's hot state is deleted from the state changelog (a tombstone on the
source's home partition, as a lost or truncated topic leaves it), and the next worker exits 78
naming the cause, without publishing a single record.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from daemon_harness import (
    Worker,
    close_through,
    collect,
    committed_offsets,
    create_topics,
    lines_as_records,
    make_scenario,
    produce,
    replay_outputs,
)

from streamdp.broker import EmbeddedBroker
from streamdp.daemon.routing import OutputTopics, home_partition
from streamdp.engine.periods import PeriodClock, format_instant
from streamdp.errors import EXIT_CONFIG

pytestmark = pytest.mark.broker
PARTITIONS = 2


def _tombstone(bootstrap: str, topic: str, partition: int, key: bytes) -> None:
    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, None, key=key, partition=partition)
        finally:
            await producer.stop()

    asyncio.run(go())


def _refused(worker: Worker) -> str:
    """The log of ``worker``, which must exit 78 (a refused state) within two minutes."""
    try:
        status = worker.process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running: {worker.log_tail()}") from None
    worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert status == EXIT_CONFIG, log[-3000:]
    return log


def _published(broker, T: OutputTopics) -> int:  # type: ignore[no-untyped-def]
    """Every record on the release topics (read for 8 s from the beginning)."""
    topics = [T.releases, T.consistent]
    seen = collect(broker, topics, lambda s: False, timeout=8)
    return sum(len(values) for topic in topics for values in seen[topic].values())


def test_a_worker_refuses_a_source_whose_state_lost_what_the_group_committed(
    broker, tmp_path: Path, unique_name
) -> None:
    suffix = unique_name("ns")
    scenario = make_scenario(periods=20, rate=6, bad_fraction=0.0, suffix=suffix)
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    app_id = f"app-{suffix}"
    T = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=T)

    def worker(name: str) -> Worker:
        return Worker(
            broker, config, app_id=app_id, partitions=PARTITIONS,
            data_dir=tmp_path / f"data-{name}", log_path=tmp_path / f"{name}.log",
            namespace=f"out-{suffix}", supervise=False, clock=scenario.clock,
        )  # fmt: skip

    first = worker("w1")
    first.wait_ready()
    expected = replay_outputs(scenario, T)
    produce(broker, lines_as_records(scenario))
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    collect(
        broker, [T.releases], lambda seen: seen[T.releases].keys() >= expected[T.releases].keys()
    )
    source = next(iter(scenario.spec.sources.values()))
    home = home_partition(source.name, PARTITIONS)
    assert committed_offsets(broker, app_id, source.topic, [home])[home], "nothing committed"
    assert first.stop() == 0, first.log_tail()
    released = _published(broker, T)

    # the source's hot state is lost (its key deleted), its nodes and the commits remain
    _tombstone(
        broker.bootstrap, f"{app_id}-state-changelog", home, json.dumps(source.name).encode()
    )
    log = _refused(worker("w2"))
    assert "restored from an older copy" in log, log[-3000:]
    assert _published(broker, T) == released, "the refused worker published something"


def _changelog(bootstrap: str, topic: str) -> dict[tuple[int, bytes], bytes | None]:
    """Every key of the changelog ``topic`` with its latest value (None: deleted), per
    partition, read from the beginning to the end offsets of the moment."""

    async def go() -> dict[tuple[int, bytes], bytes | None]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest",
        )  # fmt: skip
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]  # as create_topics made it
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            latest: dict[tuple[int, bytes], bytes | None] = {}
            while True:
                positions = [await consumer.position(tp) for tp in tps]
                if all(at >= ends[tp] for at, tp in zip(positions, tps, strict=True)):
                    return latest
                for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                    for m in messages:
                        latest[tp.partition, m.key] = m.value
        finally:
            await consumer.stop()

    return asyncio.run(go())


def _restore(bootstrap: str, topic: str, copy: dict[tuple[int, bytes], bytes | None]) -> int:
    """Make the changelog ``topic`` hold ``copy`` (an older read of it), as a restore from a
    backup leaves it: every key whose value differs gets the copy's (deleted where the copy
    has none). Returns how many keys changed."""
    now = _changelog(bootstrap, topic)
    changed = {
        key: copy.get(key) for key in now.keys() | copy.keys() if now.get(key) != copy.get(key)
    }

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for (partition, key), value in changed.items():
                await producer.send_and_wait(topic, value, key=key, partition=partition)
        finally:
            await producer.stop()

    asyncio.run(go())
    return len(changed)


def _periods_released(seen: dict[str, dict[str, list[str]]], topic: str) -> int:
    """How many (stream, epoch, period) the releases read so far cover."""
    periods = set()
    for values in seen[topic].values():
        for value in values:
            record = json.loads(value)
            periods.add((record["stream"], record["epoch"], record["period"]))
    return len(periods)


def test_a_worker_refuses_a_state_copy_that_missed_only_closes_made_by_the_clock(
    broker, tmp_path: Path, unique_name
) -> None:
    """No record at all: the public clock (a simulated day every two seconds) closes the
    periods. A copy of the state changelog is taken after a few releases, the worker releases
    more and stops, and the copy is restored. Every committed offset is still 0, so the offset
    check cannot see the copy is old; the input group's commits witness the periods closed
    (streamdp.daemon.close_witness), and the next worker exits 78 naming the cause without
    publishing a single record, instead of releasing the published days again with new noise."""
    if isinstance(broker, EmbeddedBroker):
        pytest.skip(
            "Tansu, the demo broker, keeps no commit metadata (pinned by "
            "tests/test_broker_embedded.py): the witness is checked on Kafka"
        )
    suffix = unique_name("ns")
    scenario = make_scenario(periods=20, rate=6, bad_fraction=0.0, suffix=suffix)
    config = tmp_path / "streams.toml"
    # the harness holds periods open for ten years (operator closes only): the clock closes
    # each day an hour after its end here
    lateness = 'allowed_lateness = "3650d"'
    assert lateness in scenario.spec_text
    config.write_text(scenario.spec_text.replace(lateness, 'allowed_lateness = "1h"'))
    app_id = f"app-{suffix}"
    T = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=T)
    changelog = f"{app_id}-state-changelog"
    start = min(PeriodClock(s.period).bounds(0)[0] for s in scenario.spec.streams.values())
    clock = f"simulated:{format_instant(start)}@{time.time()!r}x{86_400 / 2!r}"

    def worker(name: str) -> Worker:
        return Worker(
            broker, config, app_id=app_id, partitions=PARTITIONS,
            data_dir=tmp_path / f"data-{name}", log_path=tmp_path / f"{name}.log",
            namespace=f"out-{suffix}", supervise=False, clock=clock,
        )  # fmt: skip

    first = worker("w1")
    first.wait_ready()
    seen = collect(broker, [T.releases], lambda s: _periods_released(s, T.releases) >= 6)
    older = _changelog(broker.bootstrap, changelog)
    taken = _periods_released(seen, T.releases)
    collect(broker, [T.releases], lambda s: _periods_released(s, T.releases) >= taken + 8)
    time.sleep(5.0)  # past a commit interval: the witness of the last closes is committed
    assert first.stop() == 0, first.log_tail()
    source = next(iter(scenario.spec.sources.values()))
    assert not any(committed_offsets(broker, app_id, source.topic, range(PARTITIONS)).values())
    released = _published(broker, T)

    assert _restore(broker.bootstrap, changelog, older) > 0
    log = _refused(worker("w2"))
    assert "witnesses" in log, log[-3000:]
    assert "restored from an older copy" in log, log[-3000:]
    assert _published(broker, T) == released, "the refused worker published something"
