"""Exactly-once on Apache Kafka: the worker's outbox protocol against a Kafka transaction.

Per input batch the worker makes its effects durable in one of two ways:

* **outbox** (what ``streamdp.daemon.commit.CheckpointCommit`` does): write the checkpoint
  (the state table's changelog records, with the outbox of publications inside) and wait for every
  acknowledgement (acks=all); then publish the outputs and wait; then delete the outbox entries
  (not awaited); the input offsets are committed by the consumer afterwards (Faust, every
  ``--commit-interval``);
* **transaction**: one transactional producer (idempotent, acks=all) writes the checkpoint and
  the outputs inside ``begin_transaction`` / ``commit_transaction``, with the input offsets
  added by ``send_offsets_to_transaction``: all or nothing, for consumers that read committed.

Each is timed over ``--batches`` batches shaped like the daemon benchmark's (batches of 5,000
restaurant orders): per batch one changelog record of content keys (~52 KB), one of hot state
(~4.5 KB) and ``--outputs`` release records (~500 B) to the releases topic. Reported: batch
commit latency (median, p99) and batches/s, on a fresh single-node Apache Kafka 4.4.0 and, with
``--nodes 3``, on a 3-node cluster (replication factor 3, min.insync.replicas 2).

    .venv/bin/python benchmarks/commit_protocols.py [--batches 300] [--nodes 1 3]

Prints the table and writes commit_protocols.md to benchmarks/out/ (with --write: the committed
benchmarks/results/). Shared 2-core machine: compare the two rows of one run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from results_dir import add_write_flag, output_dir
from run_conditions import conditions_at_start, conditions_text, finish

from streamdp.broker import KafkaBroker, KafkaCluster

CHANGELOG = "bench-state-changelog"
RELEASES = "bench.releases"
INPUT = "bench-input"
GROUP = "bench-group"
SEEN_BYTES = 52_000
HOT_BYTES = 4_500
RELEASE_BYTES = 500


def payloads(
    batch: int, outputs: int
) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """(changelog records, release records) of batch number ``batch``: keys and values."""
    filler = bytes(range(97, 123)) * (SEEN_BYTES // 26)
    checkpoint = [
        (f"restaurant-orders|seen|{batch}".encode(), filler[:SEEN_BYTES]),
        (b"restaurant-orders", filler[:HOT_BYTES]),
    ]
    releases = [
        (f"restaurant-items|c{k}|0|{batch}".encode(), filler[:RELEASE_BYTES])
        for k in range(outputs)
    ]
    return checkpoint, releases


Records = list[tuple[bytes, bytes]]


async def timed_batches(
    producer_settings: dict[str, Any],
    batches: int,
    outputs: int,
    commit: Callable[[AIOKafkaProducer, int, Records, Records], Awaitable[None]],
) -> list[float]:
    """Seconds each of ``batches`` commits takes, with one producer (acks=all) for all."""
    producer = AIOKafkaProducer(
        acks="all", max_request_size=1_000_000, linger_ms=0, **producer_settings
    )
    await producer.start()
    times = []
    try:
        for batch in range(batches):
            checkpoint, releases = payloads(batch, outputs)
            t0 = time.perf_counter()
            await commit(producer, batch, checkpoint, releases)
            times.append(time.perf_counter() - t0)
        await producer.flush()
    finally:
        await producer.stop()
    return times


async def outbox_commit(
    producer: AIOKafkaProducer, batch: int, checkpoint: Records, releases: Records
) -> None:
    """Checkpoint acknowledged, then releases acknowledged, then outbox deletions sent."""
    del batch  # the input offsets are committed by the consumer, apart
    sent = [await producer.send(CHANGELOG, v, key=k, partition=0) for k, v in checkpoint]
    await asyncio.gather(*sent)
    sent = [await producer.send(RELEASES, v, key=k, partition=0) for k, v in releases]
    await asyncio.gather(*sent)
    for key, _ in releases:  # the outbox deletions: not awaited (tombstones)
        await producer.send(CHANGELOG, None, key=b"outbox|" + key, partition=0)


async def transaction_commit(
    producer: AIOKafkaProducer, batch: int, checkpoint: Records, releases: Records
) -> None:
    """Checkpoint, releases and the input offsets in one committed transaction."""
    async with producer.transaction():
        for key, value in checkpoint:
            await producer.send(CHANGELOG, value, key=key, partition=0)
        for key, value in releases:
            await producer.send(RELEASES, value, key=key, partition=0)
        await producer.send_offsets_to_transaction(
            {TopicPartition(INPUT, 0): OffsetAndMetadata((batch + 1) * 5000, "")}, GROUP
        )


PROTOCOLS: dict[str, tuple[dict[str, Any], Any]] = {
    "outbox": ({}, outbox_commit),
    "transaction": (
        {"enable_idempotence": True, "transactional_id": "bench-worker-0"},
        transaction_commit,
    ),
}


def measure(nodes: int, batches: int, outputs: int, work: Path) -> dict[str, list[list[float]]]:
    """Per protocol, the commit seconds of each of its three blocks."""
    cluster: KafkaCluster = (
        KafkaBroker(log_path=work / f"kafka-{nodes}.log", start_timeout=180)
        if nodes == 1
        else KafkaCluster(nodes, log_path=work / f"kafka-{nodes}.log", start_timeout=180)
    )
    with cluster as running:
        running.create_topics({CHANGELOG: 1, RELEASES: 1, INPUT: 1})
        results = {}
        # alternate the two protocols in blocks so that machine load drifts hit both alike
        for _ in range(3):
            for name, (extra, commit) in PROTOCOLS.items():
                settings = {"bootstrap_servers": running.bootstrap, **extra}
                times = asyncio.run(timed_batches(settings, batches // 3, outputs, commit))
                results.setdefault(name, []).append(times)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--outputs", type=int, default=5, help="release records per batch")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    add_write_flag(parser)
    args = parser.parse_args()
    rows = []
    conditions = conditions_at_start()
    with tempfile.TemporaryDirectory(prefix="streamdp-commit-") as tmp:
        for nodes in args.nodes:
            results = measure(nodes, args.batches, args.outputs, Path(tmp))
            for name, blocks in results.items():
                times = [t for block in blocks for t in block]
                ms = np.asarray(times) * 1e3
                block_p50 = [float(np.median(block)) * 1e3 for block in blocks]
                rows.append(
                    (nodes, name, float(np.median(ms)), min(block_p50), max(block_p50),
                     float(np.percentile(ms, 99)), len(times) / sum(times))
                )  # fmt: skip
                print(f"{nodes} node(s) {name:<12} p50 {rows[-1][2]:.1f} ms p99 "
                      f"{rows[-1][5]:.1f} ms {rows[-1][6]:.0f} batches/s", flush=True)  # fmt: skip
    conditions = finish(conditions)
    command = "`.venv/bin/python benchmarks/commit_protocols.py"
    if (args.batches, args.outputs, args.nodes) != (300, 5, [1, 3]):
        command += f" --batches {args.batches} --outputs {args.outputs} --nodes " + " ".join(
            map(str, args.nodes)
        )
    command += "`"
    lines = [
        "# Commit of one batch: outbox protocol against a Kafka transaction (Apache Kafka 4.4.0)",
        "",
        f"Command: {command}",
        "",
        (
            f"{args.batches} batches per protocol, shaped like the daemon benchmark's batches of "
            "5,000 orders: a 52 KB and a 4.5 KB changelog record and "
            f"{args.outputs} release records of 500 B; acks=all; the protocols alternate in "
            "three blocks (the p50 of each block gives the spread). "
            f"{conditions_text(conditions, own='the brokers')}. Compare the rows of one broker, "
            "not absolutes."
        ),
        "",
        (
            "| nodes | protocol | commit latency p50 (ms) | p50 of the blocks (min-max) "
            "| p99 (ms) | batches/s |"
        ),
        "|---:|---|---:|---:|---:|---:|",
    ]
    for nodes, name, p50, low, high, p99, rate in rows:
        lines.append(
            f"| {nodes} | {name} | {p50:.1f} | {low:.1f}-{high:.1f} | {p99:.1f} | {rate:,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    target = output_dir(args.write) / "commit_protocols.md"
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
