"""Where the feed reads public records from: a replay's output directory or the release topics.

Only two sources exist, and each names its public inputs itself, so nothing else can be pointed
at: :class:`ReplayDirectory` opens exactly ``releases.jsonl`` and ``consistent.jsonl`` (never
``dead_letter.jsonl``, ``ledger.jsonl`` or ``snapshot.json`` next to them), and
:class:`KafkaTopics` reads exactly ``<namespace>.releases`` and ``<namespace>.consistent``
(never the dead-letter, control or input topics).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from streamdp.errors import BrokerError, ConfigError
from streamdp.feed.model import FeedView
from streamdp.feed.record_fields import NOT_JSON

#: The public files of a replay's output directory, and the record kind each holds.
REPLAY_FILES = (("releases.jsonl", "release"), ("consistent.jsonl", "consistent"))
#: Topic suffixes of the public release topics, and the record kind each holds.
TOPIC_SUFFIXES = (("releases", "release"), ("consistent", "consistent"))


def _decode_line(line: bytes) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return NOT_JSON  # counted as ignored by the view


#: Bytes at the start of a file, and before the offset read up to, that must be unchanged for
#: the file to count as the same file grown (else it was replaced: read afresh).
FINGERPRINT_BYTES = 4096


@dataclass(frozen=True)
class _Read:
    """How far one file was read, and what identifies it as the same file next time: its
    device and inode, its first bytes and the bytes just before ``offset``."""

    offset: int
    device: int
    inode: int
    head: bytes
    tail: bytes


def _fingerprint(handle: BinaryIO, offset: int) -> tuple[bytes, bytes]:
    handle.seek(0)
    head = handle.read(min(offset, FINGERPRINT_BYTES))
    start = max(0, offset - FINGERPRINT_BYTES)
    handle.seek(start)
    return head, handle.read(offset - start)


@dataclass
class ReplayDirectory:
    """The public files of ``streamdp replay --output-dir DIR``, read incrementally: each
    :meth:`read_new` takes the complete lines appended since the last call. When a file read
    before was replaced (a new replay into the same directory: another inode, or its bytes up
    to where it was read changed, or it shrank or vanished), the view is emptied and both files
    are read from their start: the view never mixes two replays."""

    directory: Path
    _read: dict[str, _Read] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.directory.is_dir():
            raise ConfigError(
                f"--from must be a replay output directory, {str(self.directory)!r} is not a "
                "directory: pass the --output-dir of `streamdp replay`"
            )
        if not any((self.directory / name).is_file() for name, _ in REPLAY_FILES):
            raise ConfigError(
                f"{str(self.directory)!r} holds neither releases.jsonl nor consistent.jsonl: "
                "pass the --output-dir of `streamdp replay`"
            )

    def describe(self) -> str:
        """Where the feed reads (the operator's console: it names the directory)."""
        return f"replay output {self.directory}"

    def public_name(self) -> str:
        """What the page says it reads: no path of the server's files."""
        return "a file replay's release and consistent records"

    def read_new(self, view: FeedView) -> None:
        if any(self._replaced(name) for name, _ in REPLAY_FILES):
            view.clear()
            self._read.clear()
        for name, kind in REPLAY_FILES:
            path = self.directory / name
            try:
                handle = path.open("rb")
            except FileNotFoundError:
                continue
            with handle:  # line by line: a census replay's files are large
                held = self._read.get(name)
                offset = 0 if held is None else held.offset
                handle.seek(offset)
                for line in handle:
                    if not line.endswith(b"\n"):
                        break  # a half-written last line waits for the next call
                    offset += len(line)
                    if line.strip():
                        view.add(_decode_line(line), kind)
                status = os.fstat(handle.fileno())
                self._read[name] = _Read(
                    offset, status.st_dev, status.st_ino, *_fingerprint(handle, offset)
                )

    def _replaced(self, name: str) -> bool:
        """Whether ``name``, read before, is no longer the file that was read."""
        held = self._read.get(name)
        if held is None:
            return False
        try:
            with (self.directory / name).open("rb") as handle:
                status = os.fstat(handle.fileno())
                if (status.st_dev, status.st_ino) != (held.device, held.inode):
                    return True
                if status.st_size < held.offset:
                    return True
                return _fingerprint(handle, held.offset) != (held.head, held.tail)
        except FileNotFoundError:
            return True


@dataclass
class KafkaTopics:
    """``<namespace>.releases`` and ``<namespace>.consistent`` on a broker, read from the
    beginning and then followed. Topics that do not exist yet are picked up when they appear."""

    bootstrap: str
    namespace: str = "streamdp"

    def topics(self) -> list[tuple[str, str]]:
        return [(f"{self.namespace}.{suffix}", kind) for suffix, kind in TOPIC_SUFFIXES]

    def describe(self) -> str:
        """Where the feed reads (the operator's console: it names the broker)."""
        names = ", ".join(topic for topic, _ in self.topics())
        return f"Kafka topics {names} on broker {self.bootstrap}"

    def public_name(self) -> str:
        """What the page says it reads: the topics, never the broker's address."""
        return "the release topics " + " and ".join(topic for topic, _ in self.topics())

    async def follow(
        self,
        view: FeedView,
        stop: asyncio.Event,
        connected: Callable[[], None] | None = None,
        after_batch: Callable[[], None] | None = None,
    ) -> None:
        """Add every record of the two topics to ``view`` until ``stop`` is set; ``connected``
        is called once the broker has answered, ``after_batch`` after each batch read."""
        kinds = dict(self.topics())
        consumer = await self._consumer()
        if connected is not None:
            connected()
        try:
            assigned: set[Any] = set()
            wanted: set[Any] = set()
            rounds = 0
            while not stop.is_set():
                # look for new topics/partitions until both topics exist, then now and then
                if rounds % 20 == 0 or len({tp.topic for tp in assigned}) < len(kinds):
                    wanted = await self._partitions(consumer, kinds)
                    missing = sorted(set(kinds) - {tp.topic for tp in wanted})
                    if missing and rounds == 0:
                        # served: the topics may appear later (a worker not started yet)
                        message = await self._missing(consumer, missing)
                        them = "it" if len(missing) == 1 else "them"
                        sys.stderr.write(f"streamdp feed: warning: {message}; waiting for {them}\n")
                rounds += 1
                if wanted - assigned:
                    consumer.assign(sorted(wanted, key=lambda tp: (tp.topic, tp.partition)))
                    for fresh in wanted - assigned:
                        await consumer.seek_to_beginning(fresh)
                    assigned = wanted
                if not assigned:
                    await _wait(stop, 1.0)
                    continue
                batch = await consumer.getmany(timeout_ms=500)
                for tp, messages in batch.items():
                    for message in messages:
                        if message.value is not None:
                            view.add(_decode_line(message.value), kinds[tp.topic])
                if batch and after_batch is not None:
                    after_batch()
        finally:
            await consumer.stop()

    async def read_to_end(self, view: FeedView, timeout_seconds: float) -> None:
        """Add the records of the two topics up to their ends as of now (for a static copy).

        Raises :class:`BrokerError` when the ends are not reached within ``timeout_seconds``."""
        kinds = dict(self.topics())
        consumer = await self._consumer()
        try:
            partitions = await self._partitions(consumer, kinds)
            missing = sorted(set(kinds) - {tp.topic for tp in partitions})
            if missing:
                raise ConfigError(await self._missing(consumer, missing))
            consumer.assign(sorted(partitions, key=lambda tp: (tp.topic, tp.partition)))
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(list(partitions))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_seconds
            while not await _reached(consumer, ends):
                if loop.time() > deadline:
                    raise BrokerError(
                        f"read {self.describe()} for {timeout_seconds:.0f} s without reaching "
                        "their end: the broker is too slow or unreachable; try again"
                    )
                batch = await consumer.getmany(timeout_ms=500)
                for tp, messages in batch.items():
                    for message in messages:
                        if message.value is not None:
                            view.add(_decode_line(message.value), kinds[tp.topic])
        finally:
            await consumer.stop()

    async def _consumer(self) -> Any:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import KafkaError

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, request_timeout_ms=10_000
        )
        try:
            await consumer.start()
        except KafkaError as error:
            await consumer.stop()
            raise BrokerError(
                f"cannot reach the broker at {self.bootstrap}: {error}; check --bootstrap"
            ) from error
        return consumer

    async def _missing(self, consumer: Any, missing: list[str]) -> str:
        """What to say when topics of the feed do not exist: which, and the namespaces that
        do exist on the broker (a mistyped --topic-namespace is the usual cause)."""
        from streamdp.faust_internals import cluster_metadata

        present = (await cluster_metadata(consumer)).topics()
        suffix = "." + TOPIC_SUFFIXES[0][0]
        namespaces = sorted(t[: -len(suffix)] for t in present if t.endswith(suffix))
        hint = (
            "namespaces with a release topic there: " + ", ".join(namespaces)
            if namespaces
            else "no release topic exists there: is a worker writing to this broker?"
        )
        where = f"at {self.bootstrap} (--topic-namespace {self.namespace})"
        return f"{not_there(missing)} {where}; {hint}"

    @staticmethod
    async def _partitions(consumer: Any, kinds: dict[str, str]) -> set[Any]:
        from aiokafka import TopicPartition

        from streamdp.faust_internals import cluster_metadata

        # every topic's metadata: a consumer's own view covers only topics it already reads
        cluster = await cluster_metadata(consumer)
        found: set[Any] = set()
        for topic in kinds:
            for partition in cluster.partitions_for_topic(topic) or ():
                found.add(TopicPartition(topic, partition))
        return found


def not_there(topics: list[str]) -> str:
    """The words for missing ``topics`` (not empty): "topic a does not exist", "topics a and
    b do not exist"."""
    if len(topics) == 1:
        return f"topic {topics[0]} does not exist"
    return f"topics {', '.join(topics[:-1])} and {topics[-1]} do not exist"


async def _reached(consumer: Any, ends: dict[Any, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return
