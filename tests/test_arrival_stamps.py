"""A record is received when its fetch enters the worker's queue, not when its batch is
processed.

The batch input queue stamps each fetched run with the public clock's reading (``BatchQueue``);
the release service judges a run's records by that stamp (without Kafka timestamps, or for
whether a record came before its period's release), and every tick first processes what was
received before its instant, so a record is never found late because it waited in the queue
behind others. Checked on the service (a batch holding runs from both sides of a close
instant) and on the worker's driver (a tick finding runs received before its instant still
queued, with and without the delivery allowance). Judging at the record's own Kafka timestamp
is in ``tests/test_sent_time.py``.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from closing_day import CLOSE, SOURCE, admission, day_counts, late, release_service
from faust.types import TP

from streamdp.daemon.batch_input import BatchQueue
from streamdp.daemon.batches import BatchDriver
from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.tick_schedule import ScheduledTick


def test_a_batch_judges_each_run_at_the_reading_it_was_received_at() -> None:
    """One batch, processed after the close instant, holding a run received before it and one
    received after: the first run's record counts, the second's is late. Judged at the batch's
    reading (the previous rule), both were late."""
    now = [CLOSE + 0.02]  # the batch is processed 20 ms after the close instant
    runs = [[admission("before", 0)], [admission("after", 1)]]
    stamped = release_service(now, by_timestamp=False).process_runs(
        runs, [CLOSE - 0.01, CLOSE + 0.01]
    )
    assert late(stamped) == {"after"}
    assert late(release_service(now, by_timestamp=False).process_runs(runs)) == {
        "before",
        "after",
    }  # the batch reading


class _Consumer:
    def __init__(self) -> None:
        self.acknowledged: list[tuple[TP, int, int]] = []

    def assignment(self) -> set[TP]:
        return {TP(SOURCE, 0)}

    def acknowledge_through(self, tp: TP, offset: int, count: int) -> None:
        self.acknowledged.append((tp, offset, count))

    def highwater(self, tp: TP) -> int:
        return 0


def _driver(
    now: list[float], queue: BatchQueue, *, by_timestamp: bool = False
) -> tuple[BatchDriver, list[BatchOutcome]]:
    committed: list[BatchOutcome] = []

    async def commit(outcome: BatchOutcome) -> None:
        committed.append(outcome)

    service = release_service(now, by_timestamp=by_timestamp)
    runtime: Any = SimpleNamespace(
        service=service,
        ready=True,
        lock=asyncio.Lock(),
        shutting_down=False,
        in_flight=None,
        batches=0,
        records=0,
        backlog_warned=set(),
        settings=SimpleNamespace(tick_seconds=0.5),
    )
    driver = BatchDriver(
        SimpleNamespace(consumer=_Consumer(), rebalancing=False),
        runtime,
        protocol=SimpleNamespace(commit=commit),  # type: ignore[arg-type]
        progress=SimpleNamespace(observe=lambda ends, highwater: None),  # type: ignore[arg-type]
        end_worker=lambda error, **kwargs: None,
        new_service=lambda: service,
        queue=queue,
        source_topics={SOURCE},
    )
    return driver, committed


def test_a_tick_first_processes_what_was_received_before_its_instant() -> None:
    """Runs received before the close instant are still queued when the tick at the close
    runs (the batch task was busy): the tick processes them first, so they count and the
    day's release includes them; a run received after the instant stays queued for the batch
    task and will be judged late at its own stamp."""
    now = [CLOSE - 1.0]

    async def go() -> tuple[list[BatchOutcome], int, int]:
        queue = BatchQueue([SOURCE], max_batch=2, clock=lambda: now[0])
        await queue.put([admission(f"early-{i}", i) for i in range(3)])  # split: max_batch 2
        now[0] = CLOSE + 0.01
        await queue.put([admission("after", 3)])
        driver, committed = _driver(now, queue)
        await driver.tick(ScheduledTick(CLOSE, CLOSE, CLOSE))
        return committed, len(queue), driver._runtime.records

    committed, left, records = asyncio.run(go())
    assert left == 1  # the run received after the instant
    assert records == 3
    outcomes = committed[:-1]  # the input batches, then the tick's releases
    assert sum(o.accepted for o in outcomes) == 3
    assert not any(late(o) for o in outcomes)
    day = day_counts(committed[-1:])
    assert day, "the tick released the day"
    without = _day_released_without_input()
    assert day["total"] - without["total"] == 3  # the three records are in it (same noise)


def test_a_tick_after_the_allowance_counts_what_was_sent_before_the_close() -> None:
    """The worker as it runs: records judged at their Kafka timestamps, the day released
    ``--delivery-allowance`` after its close instant. A run received 1 s after the close,
    of a record sent 0.5 s before it, is still queued when the tick at close + 5 s runs: the
    tick processes it first and the day's release includes it."""
    now = [CLOSE + 1.0]

    async def go() -> list[BatchOutcome]:
        queue = BatchQueue([SOURCE], max_batch=2, clock=lambda: now[0])
        await queue.put([admission("sent-before-the-close", 0, sent=CLOSE - 0.5)])
        now[0] = CLOSE + 5.0
        driver, committed = _driver(now, queue, by_timestamp=True)
        await driver.tick(ScheduledTick(CLOSE + 5.0, CLOSE, CLOSE + 5.0))
        return committed

    committed = asyncio.run(go())
    assert not any(late(o) for o in committed)
    day = day_counts(committed[-1:])
    assert day["total"] - _day_released_without_input()["total"] == 1


def _day_released_without_input() -> dict[str, int]:
    """The same tick on an empty queue: the day's release with the same seeded noise."""
    now = [CLOSE - 1.0]

    async def go() -> dict[str, int]:
        driver, committed = _driver(now, BatchQueue([SOURCE], max_batch=2, clock=lambda: now[0]))
        await driver.tick(ScheduledTick(CLOSE, CLOSE, CLOSE))
        return day_counts(committed)

    return asyncio.run(go())
