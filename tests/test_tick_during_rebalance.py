"""A tick loads no source while a rebalance is under way, even one that began while the tick
waited for the runtime's lock; nor does the batch input path take a batch. And the close
witness the driver keeps for the input group's commits (streamdp.daemon.close_witness).

Faust forgets a revoked partition's committed offset when the revocation starts and reads the
new assignment's only at its recovery's seek, at the end of the rebalance; a source loaded in
between would be checked against no commit at all (``streamdp.daemon.resume_check``), so a
stale state copy would pass. The tick checks for a rebalance when it starts and again once it
holds the lock and the batch in flight is settled.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from closing_day import CLOSE, SOURCE, admission
from faust.types import TP

from streamdp.daemon.batch_input import BatchQueue
from streamdp.daemon.close_witness import CloseWitnesses, witness_text
from streamdp.daemon.tick_schedule import ScheduledTick
from tests.test_arrival_stamps import _driver


def _tick(*, rebalance_while_waiting: bool) -> tuple[int, int]:
    """(sources loaded, outcomes committed) after one tick at the close instant that first
    waits for the lock, held by a batch; a rebalance begins meanwhile when asked."""
    now = [CLOSE]

    async def go() -> tuple[int, int]:
        queue = BatchQueue([SOURCE], max_batch=2, clock=lambda: now[0])
        driver, committed = _driver(now, queue)
        # the source's home partition was just assigned: its source is not loaded yet
        driver._runtime.service.slots.clear()
        lock = driver._runtime.lock
        await lock.acquire()  # a batch holds the lock
        tick = asyncio.create_task(driver.tick(ScheduledTick(CLOSE, CLOSE, CLOSE)))
        await asyncio.sleep(0)  # the tick passed its first check and waits for the lock
        if rebalance_while_waiting:
            driver._app.rebalancing = True  # Faust's on_rebalance_start
        lock.release()
        await tick
        return len(driver._runtime.service.slots), len(committed)

    return asyncio.run(go())


def test_a_tick_that_waited_through_the_start_of_a_rebalance_loads_nothing() -> None:
    loaded, committed = _tick(rebalance_while_waiting=True)
    assert (loaded, committed) == (0, 0)


def test_the_same_tick_without_a_rebalance_loads_the_source_and_releases() -> None:
    """The control: the same tick, no rebalance, loads the source homed on the assigned
    partition and releases its due day (so the check above can fail)."""
    loaded, committed = _tick(rebalance_while_waiting=False)
    assert loaded == 1
    assert committed >= 1


class _WitnessingConsumer:
    """The consumer's side a driver with close witnesses talks to: the assignment, the
    witness marks, acknowledgements."""

    def __init__(self) -> None:
        self.marked: list[TP] = []
        self.acknowledged: list[tuple[TP, int, int]] = []

    def assignment(self) -> set[TP]:
        return {TP(SOURCE, 0)}

    def witness_closes(self, tp: TP) -> None:
        self.marked.append(tp)

    def acknowledge_through(self, tp: TP, offset: int, count: int) -> None:
        self.acknowledged.append((tp, offset, count))

    def highwater(self, tp: TP) -> int:
        return 0


def _witnessing_driver(now: list[float]) -> tuple[Any, CloseWitnesses, _WitnessingConsumer]:
    queue = BatchQueue([SOURCE], max_batch=2, clock=lambda: now[0])
    driver, _ = _driver(now, queue)
    witnesses = CloseWitnesses()
    consumer = _WitnessingConsumer()
    driver._witnesses = witnesses
    driver._runtime.settings = SimpleNamespace(tick_seconds=0.5, batch_seconds=0.05)
    driver._runtime.metrics = SimpleNamespace(forget_releases=list)
    driver._progress = SimpleNamespace(  # type: ignore[assignment]
        observe=lambda ends, highwater: None, revoked=lambda partitions: None
    )
    driver._app = SimpleNamespace(
        consumer=consumer, rebalancing=False, should_stop=False, sensors=set(), monitor=None
    )
    return driver, witnesses, consumer


def test_a_tick_witnesses_the_loaded_sources_closes_and_a_revocation_forgets_them() -> None:
    """The day closed at the tick (its checkpoint awaited) is in the home partition's
    witness, marked for the next commit; a source loaded with closes already durable is
    witnessed at the tick that loads it; the revocation drops what was not yet written."""
    now = [CLOSE]

    async def go() -> None:
        driver, witnesses, consumer = _witnessing_driver(now)
        service = driver._runtime.service
        closed_before = service.slots[SOURCE].engine.periods_closed()
        await driver.tick(ScheduledTick(CLOSE, CLOSE, CLOSE))
        closed = service.slots[SOURCE].engine.periods_closed()
        assert closed > closed_before  # the tick closed the day
        assert witnesses.to_write == {(SOURCE, 0): witness_text({SOURCE: closed})}
        assert set(consumer.marked) == {TP(SOURCE, 0)}
        await driver.revoke([TP(SOURCE, 0)])
        assert witnesses.to_write == {}
        # a new owner: the source loads with its closes durable and is witnessed at once
        service.slots.clear()
        driver._witnesses = witnesses = CloseWitnesses()
        await driver.tick(ScheduledTick(CLOSE + 1, CLOSE + 1, CLOSE + 1))
        assert witnesses.to_write == {(SOURCE, 0): witness_text({SOURCE: closed})}

    asyncio.run(go())


def test_no_input_batch_is_taken_while_a_rebalance_is_under_way() -> None:
    """The batch task leaves queued records alone during a rebalance (a source loaded then
    would be checked against no committed offset) and takes them once it ended."""
    now = [CLOSE - 1.0]

    async def go() -> tuple[int, int]:
        driver, _, consumer = _witnessing_driver(now)
        queue = driver._queue
        await queue.put([admission("during", 0)])
        driver._app.rebalancing = True
        task = asyncio.create_task(driver.ingest_queue(queue))
        await asyncio.sleep(0.3)
        during = len(queue)
        driver._app.rebalancing = False
        for _ in range(100):
            if consumer.acknowledged:
                break
            await asyncio.sleep(0.02)
        driver._app.should_stop = True
        await asyncio.wait_for(task, 5)
        return during, len(consumer.acknowledged)

    during, acknowledged = asyncio.run(go())
    assert during == 1  # still queued during the rebalance
    assert acknowledged == 1  # processed and acknowledged after it


def test_the_stream_path_leaves_a_batch_unacknowledged_during_a_rebalance() -> None:
    """``--input-path stream``: a batch the agent hands over during a rebalance is neither
    processed nor acknowledged (the recovery's seek reads it again); the same batch after the
    rebalance is."""
    now = [CLOSE - 1.0]
    runs = [[admission("during", 0)]]

    async def go() -> tuple[bool, int, bool, int]:
        driver, _, _ = _witnessing_driver(now)
        runtime = driver._runtime
        driver._app.rebalancing = True
        during = await driver._process_and_commit(runs)
        records_during = runtime.records
        driver._app.rebalancing = False
        after = await driver._process_and_commit(runs)
        return during, records_during, after, runtime.records

    assert asyncio.run(go()) == (False, 0, True, 1)
