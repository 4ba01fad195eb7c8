"""A worker refuses a source whose stored state is behind its input group's commits, on Kafka.

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
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
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

from streamdp.daemon.routing import OutputTopics, home_partition
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
    second = worker("w2")
    try:
        status = second.process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running: {second.log_tail()}") from None
    second.stop()
    log = second.log_path.read_text(errors="replace")
    assert status == EXIT_CONFIG, log[-3000:]
    assert "restored from an older copy" in log, log[-3000:]
    assert _published(broker, T) == released, "the refused worker published something"
