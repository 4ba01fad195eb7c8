"""The instant a record is judged at: whether it is late, or too far ahead, on the public clock.

The worker's rule (docs/architecture.md, "Which clock"): a record counts when it was sent
before its period's close instant, by its own Kafka timestamp, and reached the worker before
the period's release, the close instant plus the delivery allowance (``--delivery-allowance``).
Both hold exactly when the later of two instants is before the close:

- the instant the record's timestamp states, on the public clock: ``CreateTime``, when its
  producer sent it. A fact of the record alone, which no other record's fetch, processing or
  place in the input queue can move. (A ``LogAppendTime`` stamp, the broker's append, is
  judged the same way, but the records queued at the broker in front of it move it: the input
  topics keep ``CreateTime``, docs/architecture.md, "Which clock".)
- its receipt reading (the clock's reading when its fetched run entered the worker's queue,
  or when its batch was read on the per-event path) less the allowance. It decides only for a
  record in flight for longer than the allowance, and for every record received after a
  downtime that outlasted its period's release (late, all alike).

A record without a timestamp (message format v0: -1) is judged by its receipt alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streamdp.daemon.routing import InputLike

__all__ = ["LOG_APPEND_TIME", "ArrivalRule", "BrokerStampWarning", "sent_at"]

log = logging.getLogger(__name__)

#: Kafka's timestamp type of a record the broker stamped when it appended it.
LOG_APPEND_TIME = 1


def sent_at(record: InputLike) -> float | None:
    """The wall-clock instant (Unix seconds) a record's Kafka timestamp states; None when it
    has none. aiokafka (and :class:`~streamdp.daemon.routing.InputRecord`) give integer
    milliseconds, Faust's ``Message`` float seconds; both give the same instant for the same
    record."""
    stamp = getattr(record, "timestamp", None)
    if type(stamp) is int:
        return stamp / 1000 if stamp >= 0 else None
    if type(stamp) is float and stamp >= 0:  # (also refuses NaN)
        return stamp
    return None


class ArrivalRule:
    """The worker's rule for one run of records received at public reading ``received``.

    ``reading_at`` maps a wall-clock instant to the public clock's reading; ``allowance`` is
    the delivery allowance in public-clock seconds. :meth:`instant` is called once per record
    in order; records of one produce batch share their timestamp, so it is computed once per
    change."""

    __slots__ = ("_last_instant", "_last_stamp", "_reading_at", "_release_bound")

    def __init__(
        self, reading_at: Callable[[float], float], allowance: float, received: float
    ) -> None:
        self._reading_at = reading_at
        self._release_bound = received - allowance
        self._last_stamp: object = ...
        self._last_instant = self._release_bound

    def instant(self, record: InputLike) -> float:
        """The public instant ``record`` is judged at."""
        stamp = getattr(record, "timestamp", None)
        if stamp != self._last_stamp:
            self._last_stamp = stamp
            sent = sent_at(record)
            bound = self._release_bound
            self._last_instant = bound if sent is None else max(self._reading_at(sent), bound)
        return self._last_instant


class BrokerStampWarning:
    """Warns once per input topic whose records carry ``LogAppendTime`` stamps: such a stamp
    is the broker's append, after the records queued in front of it, so near a close instant
    other records can move a record across it. The worker judges it like any other stamp;
    the warning tells the operator to keep ``CreateTime``. Its moment says that a record
    arrived on the topic, so the worker uses it only where its logs are protected
    (``--input-volume-metrics``); at start it warns from the topic's configuration
    (:func:`streamdp.daemon.topic_check.broker_stamped_topics`)."""

    __slots__ = ("_warned",)

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def check(self, record: InputLike) -> None:
        """Look at one record of a run (a topic's records share their stamp type)."""
        if getattr(record, "timestamp_type", None) != LOG_APPEND_TIME:
            return
        topic = record.topic
        if topic in self._warned:
            return
        self._warned.add(topic)
        log.warning(
            "input topic %s is stamped with LogAppendTime: a broker's append time moves with "
            "the records queued ahead of a record, so near a close instant one record can "
            "decide whether another counts; set message.timestamp.type=CreateTime on it "
            "(docs/operating.md, section 2)",
            topic,
        )
