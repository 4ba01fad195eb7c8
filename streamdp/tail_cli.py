"""``streamdp tail``: print the records of any topic readably (releases, dead letters, ...).

One line per record. ``--format pretty`` (default) prints ``partition@offset time`` and then
streamdp's own records in words (a release's stream, counter, period, noisy count and running
total with their standard deviations; a consistent revision's values; a dead letter's reason and
where it came from, without the raw record) and any other value as ``key value`` with JSON
re-serialized compactly; ``--format json`` prints one JSON object per line
(``topic, partition, offset, timestamp_ms, key, value``) for scripts. Values that are not JSON are
shown safely: UTF-8 text as an escaped JSON string, anything else as base64 (json) or a short hex
preview (pretty); control characters never reach the terminal raw.

Without ``--from-beginning`` only records newer than the start are shown. Tansu's ListOffsets
can answer an offset inside the last batch (docs/dev-broker-notes.md), so the start is taken from
the high watermark of the first Fetch response instead, which is exact on Tansu and Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from streamdp.bootstrap_address import check_bootstrap
from streamdp.errors import BrokerError, ConfigError
from streamdp.record_words import TailRecord, format_json, format_pretty

ENV_BOOTSTRAP = "STREAMDP_BOOTSTRAP"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="topic to print")
    parser.add_argument(
        "--bootstrap",
        default=None,
        help=f"broker HOST:PORT (default: ${ENV_BOOTSTRAP})",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="print the records already in the topic, not only new ones",
    )
    parser.add_argument(
        "--format",
        choices=("pretty", "json"),
        default="pretty",
        help=(
            "pretty (default): one readable line per record, streamdp records in words; "
            "json: one JSON object per record for scripts (topic, partition, offset, "
            "timestamp_ms, key, value)"
        ),
    )
    parser.add_argument("--max", type=int, default=None, help="stop after N records")


def _bootstrap(args: argparse.Namespace) -> str:
    value = args.bootstrap or os.environ.get(ENV_BOOTSTRAP, "")
    if not value:
        raise ConfigError(f"no broker given: pass --bootstrap HOST:PORT or set {ENV_BOOTSTRAP}")
    return check_bootstrap(value, "--bootstrap" if args.bootstrap else ENV_BOOTSTRAP)


async def _tail(
    bootstrap: str, topic: str, from_beginning: bool, limit: int | None, fmt: str
) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    from streamdp.faust_internals import cluster_metadata

    formatter = format_json if fmt == "json" else format_pretty
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=10_000
    )
    try:
        await consumer.start()
    except KafkaError as error:
        await consumer.stop()  # (else aiokafka warns of an unclosed consumer at exit)
        raise BrokerError(f"cannot reach the broker at {bootstrap}: {error}") from error
    try:
        # the metadata of every topic; the consumer's own cluster view covers only the topics
        # it reads, which on Apache Kafka is none yet (Tansu answered with all of them)
        cluster = await cluster_metadata(consumer)
        topics = cluster.topics()
        partitions = cluster.partitions_for_topic(topic) if topic in topics else None
        if not partitions:
            known = ", ".join(sorted(t for t in topics if not t.startswith("__"))) or "none"
            raise ConfigError(f"topic {topic!r} does not exist on {bootstrap} (topics: {known})")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        held: list[Any] = []  # records fetched while the start positions are resolved
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
            start = {tp: await consumer.position(tp) for tp in tps}
        else:
            start = await _high_watermarks(consumer, tps, held)
        where = "beginning" if from_beginning else "end"
        sys.stderr.write(f"streamdp tail: reading {topic} from the {where}\n")
        sys.stderr.flush()
        printed = 0
        batch: dict[Any, list[Any]] = {}
        for m in held:
            batch.setdefault(TopicPartition(m.topic, m.partition), []).append(m)
        while limit is None or printed < limit:
            for tp, messages in batch.items():
                for m in messages:
                    if m.offset < start[tp]:
                        continue
                    record = TailRecord(topic, tp.partition, m.offset, m.timestamp, m.key, m.value)
                    sys.stdout.write(formatter(record) + "\n")
                    sys.stdout.flush()
                    printed += 1
                    if limit is not None and printed >= limit:
                        return 0
            batch = await consumer.getmany(timeout_ms=500)
    finally:
        await consumer.stop()
    return 0


async def _high_watermarks(consumer: Any, tps: list[Any], held: list[Any]) -> dict[Any, int]:
    """Each partition's high watermark from its first Fetch response (records below it are
    old); records fetched meanwhile are appended to ``held``. Seeks to the end first, so
    little is fetched: on Kafka that is the end already, on Tansu an offset inside the last
    batch (its ListOffsets answer), whose records the watermark then marks as old."""
    from aiokafka.errors import KafkaError

    await consumer.seek_to_end(*tps)
    start: dict[Any, int] = {}
    deadline = asyncio.get_running_loop().time() + 30.0
    while len(start) < len(tps):
        if asyncio.get_running_loop().time() > deadline:
            missing = ", ".join(str(tp.partition) for tp in tps if tp not in start)
            raise BrokerError(f"no fetch answer in 30 s for partitions {missing}")
        try:
            batch = await consumer.getmany(*[tp for tp in tps if tp not in start], timeout_ms=500)
        except KafkaError as error:
            raise BrokerError(f"fetch failed: {error}") from error
        for messages in batch.values():
            held.extend(messages)
        for tp in tps:
            if tp not in start:
                watermark = consumer.highwater(tp)
                if watermark is not None:
                    start[tp] = watermark
    return start


def run(args: argparse.Namespace) -> int:
    if args.max is not None and args.max < 1:
        raise ConfigError(f"--max must be >= 1 records, got {args.max}")
    if not args.topic:
        raise ConfigError("--topic must name a topic, got an empty string")
    bootstrap = _bootstrap(args)
    try:
        return asyncio.run(_tail(bootstrap, args.topic, args.from_beginning, args.max, args.format))
    except BrokenPipeError:  # `streamdp tail ... | head`
        sys.stderr.close()
        return 0
