"""Baseline: how fast a bare aiokafka consumer reads JSON events from the embedded broker.

The daemon's throughput (events/s per worker) is quoted against this number measured in the same
run: ``measure_bare_consumer(bootstrap, topic, n_events)`` is importable for that.

    ./run bench bare_consumer [--events 50000] [--repeats 5] [--partitions 1 4]

Produces ``--events`` JSON records of ~200 bytes to a fresh topic per partition count, then reads
them all ``--repeats`` times with a new consumer (no consumer group, from the beginning) and prints
the median events/s. Timings come from a shared 2-core machine: compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamdp.broker import EmbeddedBroker


def make_event(i: int, rng: np.random.Generator) -> bytes:
    """One ~200-byte JSON event shaped like the seeds' records."""
    event = {
        "id": f"evt-{i:012d}",
        "ts": 1_700_000_000 + i,
        "stream": "restaurant",
        "items": [{"item": f"dish-{int(rng.integers(0, 40)):02d}", "qty": int(rng.integers(1, 4))}],
        "attrs": {"region": f"r{int(rng.integers(0, 20))}", "channel": "app", "pad": "x" * 40},
    }
    return json.dumps(event, separators=(",", ":")).encode()


async def produce_events(bootstrap: str, topic: str, n_events: int, seed: int = 7) -> int:
    """Produce ``n_events`` events round-robin over the topic's partitions; return bytes sent."""
    rng = np.random.default_rng(seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    await producer.start()
    sent = 0
    try:
        pending = []
        for i in range(n_events):
            value = make_event(i, rng)
            sent += len(value)
            pending.append(await producer.send(topic, value, key=str(i).encode()))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent


async def _consume_all(
    bootstrap: str, topic: str, n_events: int, decoder: Callable[[bytes], Any] = json.loads
) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_partition_fetch_bytes=4 << 20
    )
    await consumer.start()
    try:
        # every topic's metadata: the consumer's own view lists only the topics it reads,
        # which on Apache Kafka is none yet (Tansu answered with all of them)
        cluster = await consumer._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        await consumer.seek_to_beginning()
        seen = 0
        start = time.perf_counter()
        while seen < n_events:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for messages in batch.values():
                for m in messages:
                    decoder(m.value)  # a consumer that does not parse measures nothing useful
                seen += len(messages)
        elapsed = time.perf_counter() - start
    finally:
        await consumer.stop()
    return n_events / elapsed


def measure_bare_consumer(
    bootstrap: str, topic: str, n_events: int, decoder: Callable[[bytes], Any] = json.loads
) -> float:
    """Events/s of one bare aiokafka consumer reading (and JSON-decoding with ``decoder``,
    Python's ``json.loads`` unless given) the first ``n_events`` records of ``topic`` from the
    beginning, all partitions, no consumer group."""
    return asyncio.run(_consume_all(bootstrap, topic, n_events, decoder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    rows = []
    with EmbeddedBroker() as broker:
        for n_partitions in args.partitions:
            topic = f"bench-bare-{n_partitions}"
            broker.create_topics({topic: n_partitions})
            t0 = time.perf_counter()
            size = asyncio.run(produce_events(broker.bootstrap, topic, args.events))
            produce_rate = args.events / (time.perf_counter() - t0)
            rates = [
                measure_bare_consumer(broker.bootstrap, topic, args.events)
                for _ in range(args.repeats)
            ]
            rows.append((n_partitions, size / args.events, produce_rate, rates))
    print(
        f"bare aiokafka consumer on embedded Tansu, {args.events} events, "
        f"median of {args.repeats} runs (shared 2-core machine)"
    )
    print(
        f"{'partitions':>10} {'bytes/event':>11} {'produce ev/s':>13} "
        f"{'consume ev/s (median)':>22} {'min':>9} {'max':>9}"
    )
    for n_partitions, mean_size, produce_rate, rates in rows:
        print(
            f"{n_partitions:>10} {mean_size:>11.0f} {produce_rate:>13,.0f} "
            f"{statistics.median(rates):>22,.0f} {min(rates):>9,.0f} {max(rates):>9,.0f}"
        )


if __name__ == "__main__":
    main()
