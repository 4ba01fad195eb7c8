"""Synthetic demo input: events of one source, keyed by the source name, paced by event time.

The synthetic generator (:func:`streamdp.synth.generators.generate`) yields a source's events in
event-time order, period after period. The demo replays them so that event time advances by one
simulated day every ``pace`` seconds of wall clock: an event at simulated time ``ts`` is due at
``(ts - origin) / 86400 * pace`` seconds after the feed starts. Bad records (mixed in by the
generator so the dead-letter count moves) are sent together with the good event before them.

Every record is keyed by its source name: the daemon requires all of a source's records on one
partition and dead-letters others as ``wrong_partition_key``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from streamdp.daemon.routing import source_spec
from streamdp.engine.periods import PeriodClock, parse_instant
from streamdp.engine.spec import EngineSpec
from streamdp.synth.generators import generate

DAY_SECONDS = 86400.0
#: Simulated periods generated per feed; the generator is lazy, so this only bounds a very
#: long demo (10,000 days at 1.5 s per day is over four hours).
MAX_PERIODS = 10_000


@dataclass(frozen=True)
class Record:
    """One input record: ``due`` seconds after the feed starts, sent to ``topic`` with ``key``."""

    due: float
    topic: str
    key: bytes
    value: bytes
    bad: bool


def paced_records(
    scenario: str,
    spec: EngineSpec,
    source: str,
    *,
    rate: float,
    pace: float,
    seed: int,
    bad_fraction: float,
) -> Iterator[Record]:
    """Yield the records of ``source`` (a source of ``spec``) for the synthetic ``scenario``.

    ``rate`` is the mean number of good events per day (Poisson), ``pace`` the wall-clock
    seconds per simulated day, ``bad_fraction`` the probability of a bad record after each good
    event. ``due`` is non-decreasing.
    """
    own = source_spec(spec, source)
    topic = own.sources[source].topic
    grid = next(iter(own.streams.values()))
    clock = PeriodClock(grid.period)
    origin = clock.bounds(0)[0]
    period_days = (clock.bounds(0)[1] - origin) / DAY_SECONDS
    due = 0.0
    for line in generate(
        scenario,
        MAX_PERIODS,
        rate * period_days,
        seed=seed,
        bad_fraction=bad_fraction,
        spec=own,
    ):
        if line.expect is None:
            ts = parse_instant(json.loads(line.text).get("event_time"))
            if ts is not None:
                due = max(due, (ts - origin) / DAY_SECONDS * pace)
        yield Record(due, topic, source.encode(), line.text.encode(), line.expect is not None)


@dataclass
class FeedStats:
    """Progress of one feed (updated by :func:`run_feed`)."""

    sent: int = 0
    bad: int = 0
    simulated_day: int = 0


async def run_feed(
    records: Iterator[Record],
    send: Callable[[Record], Awaitable[Awaitable[object]]],
    stats: FeedStats,
    *,
    pace: float,
    stop: asyncio.Event,
    clock: Callable[[], float] = time.monotonic,
    start: float | None = None,
) -> None:
    """Send ``records`` when they are due until ``stop`` is set.

    ``start``: the ``clock`` instant the feed's time 0 is at (default: now); the demo starts
    the feeds at the instant the worker's simulated public clock is anchored to.

    ``send`` hands one record to the producer and returns its delivery (aiokafka's ``send``:
    enqueue, then a future of the acknowledgement); deliveries are awaited before each wait
    and every 500 records, which bounds the number in flight.
    """
    start = clock() if start is None else start
    pending: list[Awaitable[object]] = []
    for record in records:
        if stop.is_set():
            break
        wait = start + record.due - clock()
        if wait > 0:
            await _flush(pending)
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, start + record.due - clock()))
            except TimeoutError:
                pass
            else:
                break
        pending.append(await send(record))
        stats.sent += 1
        stats.bad += record.bad
        stats.simulated_day = int(record.due / pace) if pace > 0 else 0
        if len(pending) >= 500:
            await _flush(pending)
    await _flush(pending)


async def _flush(pending: list[Awaitable[object]]) -> None:
    waiting, pending[:] = list(pending), []
    if waiting:
        await asyncio.gather(*waiting)
