"""Where records go: a source's home partition, the output topics, input runs, the
configuration of one source, and the control topic's routing (issue 15: the routing half of
the release service, :mod:`streamdp.daemon.service`).

Records of one source must all arrive on one partition, its *home*: the partition the default
(murmur2) partitioner maps the source name to (or the only partition). A record on any other
partition, or keyed otherwise, is dead-lettered as ``wrong_partition_key``
(:func:`misplaced`) before touching any state, so two workers can never each count part of a
source. Control records come only from the control topic and are routed to the source of the
stream they name (:func:`source_of_control`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.partitioner import murmur2

from streamdp.engine import DeadLetterRecord, EngineSpec
from streamdp.engine.changes import OutputRecord
from streamdp.engine.events import Reason
from streamdp.engine.raw_records import raw_text
from streamdp.engine.spec import SourceSpec


def home_partition(source: str, partitions: int) -> int:
    """The partition Kafka's default partitioner sends records keyed ``source`` to."""
    hashed: int = murmur2(source.encode("utf-8"))
    return (hashed & 0x7FFFFFFF) % partitions


#: the :class:`OutputTopics` field of each record kind (looked up per output record)
_TOPIC_OF_KIND = {"release": "releases", "consistent": "consistent", "dead_letter": "dead_letter"}


@dataclass(frozen=True)
class OutputTopics:
    """Names of the topics the daemon writes."""

    releases: str = "streamdp.releases"
    consistent: str = "streamdp.consistent"
    dead_letter: str = "streamdp.dead-letter"
    control: str = "streamdp.control"

    @classmethod
    def in_namespace(cls, namespace: str) -> OutputTopics:
        """``<namespace>.releases``, ``.consistent``, ``.dead-letter``, ``.control``."""
        return cls(
            f"{namespace}.releases",
            f"{namespace}.consistent",
            f"{namespace}.dead-letter",
            f"{namespace}.control",
        )

    def for_record(self, record: OutputRecord) -> str:
        """The topic of a record, by its kind (the same routing every sink uses)."""
        return str(getattr(self, _TOPIC_OF_KIND[record.kind]))


class InputLike(Protocol):
    """What the service reads of an input record: aiokafka's ``ConsumerRecord``, Faust's
    ``Message`` and :class:`InputRecord` all have it (a None value is read as empty)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


# one partition's records, in offset order
Run = Sequence[InputLike]


def runs_of(records: Iterable[InputLike]) -> list[Run]:
    """``records`` cut into runs of consecutive records of the same (topic, partition)."""
    runs: list[Run] = []
    current: list[InputLike] = []
    position: tuple[str, int] | None = None
    for record in records:
        here = (record.topic, record.partition)
        if here != position:
            current = []
            runs.append(current)
            position = here
        current.append(record)
    return runs


@dataclass(frozen=True)
class InputRecord:
    """One record as read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    # the record's Kafka timestamp in milliseconds, as aiokafka gives it (None: none)
    timestamp: int | None = None
    # 0: CreateTime (its producer's), 1: LogAppendTime (the broker's append)
    timestamp_type: int = 0


def source_spec(spec: EngineSpec, source: str) -> EngineSpec:
    """The configuration restricted to one source and the streams reading it."""
    streams = {n: s for n, s in spec.streams.items() if s.source == source}
    # the snapshot fingerprint covers only this source and its streams: editing another
    # source's part of the configuration must not make this source's state unrestorable
    raw_sources = dict(spec.raw.get("sources", {}))
    raw_streams = dict(spec.raw.get("streams", {}))
    return EngineSpec(
        sources={source: spec.sources[source]},
        streams=streams,
        raw={
            "source": {source: raw_sources.get(source)},
            "streams": {n: raw_streams.get(n) for n in streams},
        },
    )


def source_of_control(
    spec: EngineSpec,
    by_topic: Mapping[str, SourceSpec],
    value: bytes,
    decoded: Mapping[str, Any] | None = None,
) -> SourceSpec | None:
    """The source a control-topic record names (by ``stream``, else ``source``), if any.
    ``decoded``: the record as the engine's decoder read it (then it is not parsed again);
    None when that decoder refused it, and Python's lenient reader finds the name, so that the
    engine of the named source refuses the record with its reason."""
    data: Any = decoded
    if data is None:
        try:
            data = json.loads(value)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    if not isinstance(data, dict):
        return None
    stream = data.get("stream")
    if isinstance(stream, str) and stream in spec.streams:
        return spec.sources[spec.streams[stream].source]
    source = data.get("source")
    if isinstance(source, str):
        if source in spec.sources:
            return spec.sources[source]
        return by_topic.get(source)
    return None


def misplaced(record: InputLike, source: SourceSpec) -> DeadLetterRecord:
    """The dead letter of a record of ``source`` not keyed or partitioned as its source."""
    return dead_letter(
        record,
        "wrong_partition_key",
        f"records of source {source.name!r} must be keyed by {source.name!r} with the "
        "default (murmur2) partitioner so that they all land on the partition holding the "
        "source's state (or use single-partition topics)",
        source=source.name,
    )


def dead_letter(
    record: InputLike, reason: Reason, message: str, *, source: str | None = None
) -> DeadLetterRecord:
    """The dead letter of a record refused before reaching any engine (its raw value kept as
    UTF-8 text, else base64, like the engine's own)."""
    raw, encoding = raw_text(record.value if record.value is not None else b"")
    return DeadLetterRecord(
        reason=reason,
        message=message,
        raw=raw,
        raw_encoding=encoding,
        source=source,
        topic=record.topic,
        offset=record.offset,
        event_id=None,
    )
