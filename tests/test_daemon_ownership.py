"""One owner per source, with two workers on a real broker (issue 17).

A producer with its own partitioner spreads records keyed ``restaurant-orders`` over both
partitions of the input topic. Before, whichever record came first decided the source's home,
so two workers each owned the source and published every release twice with half-counts. Now
the home is the partition Kafka's default partitioner maps the name to: records on the other
partition are dead-lettered as ``wrong_partition_key`` (and counted in the metric the
``StreamdpRecordsOnForeignPartition`` alert watches), exactly one worker owns the source, and
every release has one value, equal to an engine given only the home partition's records.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from daemon_harness import (
    Scenario,
    Worker,
    close_records,
    collect,
    create_topics,
    make_scenario,
    produce,
    wait_consumed,
)
from prometheus_client.parser import text_string_to_metric_families

from streamdp.daemon.routing import OutputTopics, home_partition
from streamdp.engine import Engine
from streamdp.noise import InsecureSeededSampler

pytestmark = [pytest.mark.broker, pytest.mark.slow]
PARTITIONS = 2
SEED = 41


def _produce_to_partitions(broker, records: list[tuple[str, bytes, bytes, int]]) -> None:  # type: ignore[no-untyped-def]
    """Send each record to the partition given, whatever its key (a custom partitioner)."""

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            futures = [await producer.send(t, v, key=k, partition=p) for t, k, v, p in records]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(go())


def _reference(scenario: Scenario, topic: str, kept: list[str], topics: OutputTopics) -> dict:  # type: ignore[type-arg]
    engine = Engine(scenario.spec, sampler=InsecureSeededSampler(SEED))
    engine.advance_clock(scenario.end)
    for offset, text in enumerate(kept):
        engine.ingest(text.encode(), source_topic=topic, partition=0, offset=offset)
    out: dict[str, str] = {}
    for stream, spec in scenario.spec.streams.items():
        if spec.source == "restaurant-orders":
            for record in engine.close(stream, scenario.end):
                if topics.for_record(record) == topics.releases:
                    out[record.key] = record.to_json()
    return out


def test_records_spread_over_two_partitions_have_one_owner_and_one_value(
    broker, tmp_path: Path, unique_name
) -> None:  # type: ignore[no-untyped-def]
    suffix = unique_name("own")
    scenario = make_scenario(periods=12, rate=5, suffix=suffix)
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    app_id = f"app-{suffix}"
    topics = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=topics)
    topic = f"orders-{suffix}"
    home = home_partition("restaurant-orders", PARTITIONS)
    lines = [line.text for line in scenario.lines[topic]]
    spread = [
        (topic, b"restaurant-orders", t.encode(), i % PARTITIONS) for i, t in enumerate(lines)
    ]
    kept = [t for i, t in enumerate(lines) if i % PARTITIONS == home]
    foreign = len(lines) - len(kept)

    workers = [
        Worker(
            broker,
            config,
            app_id=app_id,
            partitions=PARTITIONS,
            data_dir=tmp_path / f"d{n}",
            log_path=tmp_path / f"w{n}.log",
            namespace=f"out-{suffix}",
            clock=scenario.clock,
            extra_args=("--input-volume-metrics",),
        )
        for n in range(2)
    ]
    try:
        for worker in workers:
            worker.wait_ready()
        _produce_to_partitions(broker, spread)
        wait_consumed(broker, app_id, {topic: len(lines)}, PARTITIONS)
        produce(broker, close_records(scenario, topics, scenario.end))
        expected = _reference(scenario, topic, kept, topics)
        assert expected

        def done(seen):  # type: ignore[no-untyped-def]
            releases = seen[topics.releases]
            letters = [json.loads(v) for vs in seen[topics.dead_letter].values() for v in vs]
            mine = [d for d in letters if d.get("topic") == topic]
            return all(k in releases for k in expected) and len(mine) >= foreign

        seen = collect(broker, [topics.releases, topics.dead_letter], done, timeout=120)
        for key, value in expected.items():
            assert set(seen[topics.releases][key]) == {value}, f"release {key} has other values"
        letters = [json.loads(v) for vs in seen[topics.dead_letter].values() for v in vs]
        mine = [d for d in letters if d.get("topic") == topic]
        assert {d["reason"] for d in mine} == {"wrong_partition_key"}
        assert len({d["offset"] for d in mine}) == foreign

        owners = []
        refused = 0.0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            owners = [
                w
                for w in workers
                if "restaurant-orders" in (w.status() or {}).get("sources_owned", [])
            ]
            refused = sum(
                sample.value
                for w in workers
                for family in text_string_to_metric_families(w.metrics())
                for sample in family.samples
                if sample.name == "streamdp_events_rejected_total"
                and sample.labels.get("reason") == "wrong_partition_key"
            )
            if len(owners) == 1 and refused >= foreign:
                break
            time.sleep(0.5)
        assert len(owners) == 1, "the source must have exactly one owner"
        assert refused >= foreign  # what the StreamdpRecordsOnForeignPartition alert watches
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.stop()
