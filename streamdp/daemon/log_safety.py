"""Logging in a worker process: no record bytes or values in any log line at any level, and no
cost below the level.

Three libraries log record contents at DEBUG: Faust's topic sender (``send: topic=... v=...``),
aiokafka's producer (``Sending (key=... value=...)``) and aiokafka's connection
(``Request to ...: ProduceRequest(... records=b'...')`` and ``Response from ...:
FetchResponse(... records=b'...')``: about 100-byte prefixes of every produced and fetched
batch). A worker's input holds raw records and its state changelog raw counts: at
``--log-level debug`` these lines would print them. Two defences, both installed by
:func:`hold_value_loggers`:

1. those loggers are held at INFO whatever the level asked for;
2. a log-record factory for the whole process replaces, in every record of every logger and
   level, any argument that can carry record contents (bytes-like values, Kafka protocol
   requests and responses, consumed records, Faust messages, and containers holding them)
   by a placeholder such as ``<312 bytes withheld>``.

A worker's logs are public unless input-volume metrics are on (``--input-volume-metrics``,
docs/operating.md section 10), so they must not say how many records arrived either. Faust's
table recovery logs, at INFO on every start and rebalance, tables of the state changelog's
highwaters and offsets and how many changes remain to read: the changelog takes a fixed number
of writes per record, so those numbers count the input. Unless ``show_offsets``, the factory
withholds every number from the records of :data:`OFFSET_LOGGERS` (``Highwater ... | 13 |``
becomes ``| # |``); the lines still say what recovery is doing. The same goes for the few
INFO lines of Faust's consumer and aiokafka's fetcher that name an input offset. At
``--log-level debug`` the same goes for every DEBUG record of Faust, mode and aiokafka
(:data:`OFFSET_DEBUG_LOGGERS`), whose fetch, seek and commit lines name input offsets.

Faust's worker also sets the root logger to DEBUG when it shows its start-up spinner (the
spinner turns once per log record), so every DEBUG call of Faust, mode and aiokafka builds a
record that no handler prints. The worker runs without the spinner: the root keeps the level
asked for.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, TypeVar

Worker = TypeVar("Worker")

#: Loggers whose DEBUG lines carry record keys, values or batches.
VALUE_LOGGERS = ("faust.topics", "aiokafka.producer.producer", "aiokafka.conn")

#: Loggers (and their children) whose lines carry state changelog offsets and highwaters, or
#: input offsets at INFO and above (Faust's consumer: "Discarded commit for revoked partitions
#: that will be eventually processed again: {TP(...): 123456}"; aiokafka's fetcher: "Fetch
#: offset 123456 is out of range for partition ..."; audit of 2026-11-28).
OFFSET_LOGGERS = ("faust.tables", "faust.transport.consumer", "aiokafka.consumer.fetcher")

#: Libraries (and their children) whose DEBUG lines carry input and changelog offsets
#: (``Adding fetch request for partition ... at offset ...``, commits, seeks).
OFFSET_DEBUG_LOGGERS = ("aiokafka", "faust", "mode")

_DIGITS = re.compile(r"[0-9]+")

_MARK = "_streamdp_withholds_record_bytes"


def hold_value_loggers(*, show_offsets: bool = False) -> None:
    """Keep the loggers that print record contents at INFO or above, and withhold record
    contents from every log record of the process, and numbers from the records of
    :data:`OFFSET_LOGGERS` (and the DEBUG records of :data:`OFFSET_DEBUG_LOGGERS`) unless
    ``show_offsets`` (see the module docstring)."""
    for name in VALUE_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.INFO:  # NOTSET (0) follows the root, which may go to DEBUG
            logger.setLevel(logging.INFO)
    current = logging.getLogRecordFactory()
    base = getattr(current, _MARK, current)  # a factory of ours: replace it, keep its base
    logging.setLogRecordFactory(withholding_factory(base, show_offsets=show_offsets))


@lru_cache(maxsize=1)
def _record_types() -> tuple[type, ...]:
    """Types whose repr shows record contents (imported on first use)."""
    from aiokafka.protocol.struct import Struct
    from aiokafka.structs import ConsumerRecord
    from faust.types.tuples import Message

    return (Struct, ConsumerRecord, Message)


def _carries_record(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (bytes | bytearray | memoryview, *_record_types())):
        return True
    if depth >= 2:
        return False
    if isinstance(value, list | tuple | set | frozenset):
        return any(_carries_record(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return any(
            _carries_record(k, depth + 1) or _carries_record(v, depth + 1) for k, v in value.items()
        )
    return False


def withheld(value: Any) -> Any:
    """``value``, or a placeholder naming its type and size if it can carry record contents."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes withheld>"
    if _carries_record(value):
        return f"<{type(value).__name__} withheld>"
    return value


def withholding_factory(
    base: Callable[..., logging.LogRecord], *, show_offsets: bool = False
) -> Callable[..., logging.LogRecord]:
    """A log-record factory that builds records with ``base`` and withholds record contents
    from their message and arguments, and (unless ``show_offsets``) every number from the
    records of :data:`OFFSET_LOGGERS`."""

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        if not isinstance(record.msg, str):
            record.msg = withheld(record.msg)
        if isinstance(record.args, Mapping):
            if any(_carries_record(v) for v in record.args.values()):
                record.args = {k: withheld(v) for k, v in record.args.items()}
        elif record.args and any(_carries_record(v) for v in record.args):
            record.args = tuple(withheld(v) for v in record.args)
        if not show_offsets and _counts_offsets(record):
            record.msg = _DIGITS.sub("#", _message(record))  # after record bytes are withheld
            record.args = ()
        return record

    setattr(factory, _MARK, base)
    return factory


def _counts_offsets(record: logging.LogRecord) -> bool:
    tops = OFFSET_LOGGERS if record.levelno >= logging.INFO else OFFSET_DEBUG_LOGGERS
    name = record.name
    return any(name == top or name.startswith(top + ".") for top in tops)


def _message(record: logging.LogRecord) -> str:
    """The record's message with its arguments (its format string when they do not fit)."""
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return str(record.msg)


def plain_worker(worker: Worker) -> Worker:
    """``worker`` (a ``faust.Worker``) without the start-up spinner; returns it."""
    worker.spinner = None  # type: ignore[attr-defined]
    return worker
