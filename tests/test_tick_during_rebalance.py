"""A tick loads no source while a rebalance is under way, even one that began while the tick
waited for the runtime's lock.

Faust forgets a revoked partition's committed offset when the revocation starts and reads the
new assignment's only at its recovery's seek, at the end of the rebalance; a source loaded in
between would be checked against no commit at all (``streamdp.daemon.resume_check``), so a
stale state copy would pass. The tick checks for a rebalance when it starts and again once it
holds the lock and the batch in flight is settled.
"""

from __future__ import annotations

import asyncio

from closing_day import CLOSE

from streamdp.daemon.batch_input import BatchQueue
from streamdp.daemon.tick_schedule import ScheduledTick
from tests.test_arrival_stamps import _driver


def _tick(*, rebalance_while_waiting: bool) -> tuple[int, int]:
    """(sources loaded, outcomes committed) after one tick at the close instant that first
    waits for the lock, held by a batch; a rebalance begins meanwhile when asked."""
    now = [CLOSE]

    async def go() -> tuple[int, int]:
        queue = BatchQueue(["admissions"], max_batch=2, clock=lambda: now[0])
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
