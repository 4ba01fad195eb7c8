"""One closing day of the hospital example's census stream, as the arrival tests drive it: its
close instant, an admission of that day (with or without a Kafka timestamp), a release service
judging records at receipt or as the worker does, and what a batch refused as late or released
for the day."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine.clock import PublicClock
from streamdp.engine.periods import PeriodClock
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import example_spec

SPEC = example_spec("hospital")
SOURCE = next(iter(SPEC.sources))
CENSUS = SPEC.streams["admissions-census"]
DAY = 3
DAY_START, DAY_END = PeriodClock(CENSUS.period).bounds(DAY)
CLOSE = DAY_END + CENSUS.allowed_lateness_seconds  # the day's public close instant
ALLOWANCE = 5.0  # the worker's default delivery allowance


def admission(
    event_id: str, offset: int, *, sent: float | None = None, ward: str = "icu"
) -> InputRecord:
    """An admission of the closing day; ``sent``: the instant its Kafka timestamp states (in
    whole milliseconds, as a producer stamps it), None for none."""
    value = {
        "event_id": event_id,
        "event_time": DAY_END - 60.0,
        "source": SOURCE,
        "attributes": {"sex": "male", "age": "0-17", "ward": ward, "hiv_positive": False},
    }
    stamp = None if sent is None else math.floor(sent * 1000)
    return InputRecord(SOURCE, 0, offset, SOURCE.encode(), json.dumps(value).encode(), stamp)


def release_service(
    now: list[float], *, by_timestamp: bool, warn_broker_stamps: bool = False
) -> ReleaseService:
    """The service on clock ``now[0]``: judging records at receipt, or (``by_timestamp``) as
    the worker does, at their Kafka timestamps with :data:`ALLOWANCE`."""
    service = ReleaseService(
        SPEC,
        sampler=InsecureSeededSampler(3),
        state={},
        clock=lambda: now[0],
        topic_partitions={SOURCE: 1},
        reading_at=PublicClock().at if by_timestamp else None,
        allowance=ALLOWANCE if by_timestamp else 0.0,
        warn_broker_stamps=warn_broker_stamps,
    )
    service.assign([0])
    return service


def late(outcome: BatchOutcome) -> set[str | None]:
    """The event ids ``outcome`` refused as late."""
    return {d.event_id for d in outcome.dead_letters if d.reason == "late"}


def day_counts(outcomes: Iterable[BatchOutcome]) -> dict[str, int]:
    """The closing day's released census counts among ``outcomes``' publications."""
    released = [json.loads(p.value) for o in outcomes for p in o.publications]
    return {
        r["counter"]: r["noisy_count"]
        for r in released
        if r.get("kind") == "release" and r["stream"] == CENSUS.name and r["period"] == DAY + 1
    }
