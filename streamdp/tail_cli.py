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
import base64
import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamdp.bootstrap_address import check_bootstrap
from streamdp.errors import BrokerError, ConfigError

ENV_BOOTSTRAP = "STREAMDP_BOOTSTRAP"
_HEX_PREVIEW = 24


@dataclass(frozen=True)
class TailRecord:
    """One consumed record, as bytes (no decoding yet)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


def _decode(raw: bytes | None) -> tuple[str, Any]:
    """Classify ``raw``: ("null", None) | ("json", obj) | ("text", str) | ("binary", bytes)."""
    if raw is None:
        return "null", None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", raw
    try:
        return "json", json.loads(text)
    except ValueError:
        return "text", text


def _pretty_part(raw: bytes | None) -> str:
    kind, obj = _decode(raw)
    if kind == "null":
        return "null"
    if kind == "json":
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if kind == "text":
        return json.dumps(obj, ensure_ascii=False)  # quoted, control characters escaped
    data: bytes = obj
    preview = data[:_HEX_PREVIEW].hex()
    more = "..." if len(data) > _HEX_PREVIEW else ""
    return f"<{len(data)} bytes 0x{preview}{more}>"


def _json_part(raw: bytes | None) -> dict[str, Any] | None:
    kind, obj = _decode(raw)
    if kind == "null":
        return None
    if kind == "json":
        return {"json": obj}
    if kind == "text":
        return {"text": obj}
    return {"base64": base64.b64encode(obj).decode("ascii")}


def format_pretty(record: TailRecord) -> str:
    """``p<partition>@<offset> <UTC time>`` and the record: a streamdp release, consistent or
    dead-letter record in words (:func:`describe_record`), anything else as ``<key> <value>``."""
    when = (
        datetime.fromtimestamp(record.timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if record.timestamp_ms is not None and record.timestamp_ms >= 0
        else "-"
    )
    kind, value = _decode(record.value)
    described = describe_record(value) if kind == "json" else None
    if described is not None:
        return f"p{record.partition}@{record.offset} {when} {described}"
    return (
        f"p{record.partition}@{record.offset} {when} "
        f"{_pretty_part(record.key)} {_pretty_part(record.value)}"
    )


def _word(value: Any) -> str:
    """``value`` as one printable word: plain if it is, else JSON-quoted (escapes shown)."""
    text = str(value)
    if text and text.isprintable() and " " not in text:
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if quoted.isprintable() else json.dumps(text)


def _number(value: Any) -> str:
    """A count or an estimate with thousands separators (one decimal for non-integers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _word(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _sd(value: Any) -> str:
    return f"sd {value:.3g}" if isinstance(value, int | float) else f"sd {_word(value)}"


def describe_record(value: Any) -> str | None:
    """A streamdp output record (``kind`` release, consistent or dead_letter) in words on one
    line, or None for anything else. A dead letter's raw record is left out (``--format json``
    shows it; it is protected like the input topic)."""
    if not isinstance(value, dict):
        return None
    kind = value.get("kind")
    if kind == "dead_letter":
        origin = f"{_word(value.get('topic'))}@{_word(value.get('offset'))}"
        stream = value.get("stream")
        event_id = value.get("event_id")  # None: the record had none (malformed, say)
        return (
            f"dead letter {_word(value.get('reason'))} from {origin}"
            + (f" stream {_word(stream)}" if stream else "")
            + (f" event {_word(event_id)}" if event_id is not None else " (no event id)")
            + f": {_word(value.get('message', ''))} "
            f"(raw {_word(value.get('raw_length'))} bytes; --format json shows it)"
        )
    try:
        where = f"epoch {_word(value['epoch'])} period {_word(value['period'])}"
        span = f"[{_word(value.get('period_start', '?'))}, {_word(value.get('period_end', '?'))})"
        if kind == "release":
            return (
                f"release {_word(value['stream'])}/{_word(value['counter'])} {where} {span}: "
                f"count {_number(value['noisy_count'])} ({_sd(value['count_std'])}), "
                f"running total {_number(value['noisy_total'])} ({_sd(value['total_std'])}); "
                f"epsilon {_word(value.get('epsilon'))} per epoch, "
                f"{_word(value.get('mechanism'))}"
            )
        if kind == "consistent":
            totals = value.get("totals") or {}
            stds = value.get("total_std") or {}
            values = ", ".join(
                f"{_word(name)} {_number(total)}"
                + (f" ({_sd(stds[name])})" if name in stds else "")
                for name, total in totals.items()
            )
            return (
                f"consistent {_word(value['stream'])} revision {_word(value['revision'])} "
                f"{where} {span}: running totals {values}"
            )
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def format_json(record: TailRecord) -> str:
    """One JSON object; ``key``/``value`` are ``{"json": ...}``, ``{"text": ...}``,
    ``{"base64": ...}`` or null."""
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "key": _json_part(record.key),
            "value": _json_part(record.value),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


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
