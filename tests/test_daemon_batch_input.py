"""The batch input queue between Faust's consumer and the release service: order, batch size,
back-pressure and dropping a revoked partition's records (which are never acknowledged).
Batches are lists of runs (one partition's records of one fetch, in offset order)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamdp.daemon.batch_input import BatchQueue, last_offsets, unread


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int


def flat(runs: Sequence[Sequence[Any]]) -> list[Any]:
    for run in runs:  # each run is one partition's, in offset order
        assert len({(m.topic, m.partition) for m in run}) == 1
        assert [m.offset for m in run] == sorted(m.offset for m in run)
    return [m for run in runs for m in run]


def test_take_returns_fetch_order_in_batches_of_at_most_max_batch() -> None:
    async def go() -> list[list[tuple[int, int]]]:
        queue = BatchQueue(["in"], max_batch=3)
        await queue.put([Msg("in", 0, o) for o in range(5)])
        await queue.put([Msg("in", 1, o) for o in range(2)])
        await queue.put([Msg("in", 0, 5)])
        batches = [await queue.take(0.1) for _ in range(3)]
        empty = await queue.take(0.05)
        assert len(queue) == 0
        return [[(m.partition, m.offset) for m in flat(b)] for b in (*batches, empty)]

    assert asyncio.run(go()) == [
        [(0, 0), (0, 1), (0, 2)],  # a run split at the batch size
        [(0, 3), (0, 4), (1, 0)],
        [(1, 1), (0, 5)],
        [],
    ]


def test_put_waits_while_the_queue_is_full_until_a_batch_is_taken() -> None:
    async def go() -> tuple[bool, bool, int]:
        queue = BatchQueue(["in"], max_batch=2)  # holds at most 8
        await queue.put([Msg("in", 0, o) for o in range(8)])
        blocked = asyncio.ensure_future(queue.put([Msg("in", 0, 8)]))
        # let the put run as far as it can: with room it would finish in its first step (it
        # does no I/O), so still pending after several loop turns means it waits for room
        for _ in range(10):
            await asyncio.sleep(0)
        waited = not blocked.done()
        await queue.take(0.1)
        await asyncio.wait_for(blocked, 1.0)
        return waited, blocked.done(), len(queue)

    assert asyncio.run(go()) == (True, True, 7)


def test_drop_forgets_only_the_revoked_partitions() -> None:
    async def go() -> list[tuple[int, int]]:
        queue = BatchQueue(["in"], max_batch=10)
        for o in range(3):
            for p in (0, 1):
                await queue.put([Msg("in", p, o)])
        assert queue.drop({("in", 1)}) == 3
        assert len(queue) == 3
        return [(m.partition, m.offset) for m in flat(await queue.take(0.1))]

    assert asyncio.run(go()) == [(0, 0), (0, 1), (0, 2)]


def test_a_fetch_made_before_a_revocation_is_not_queued_after_it() -> None:
    async def go() -> tuple[bool, bool, list[int]]:
        queue = BatchQueue(["in"], max_batch=10)
        before = queue.generation
        queue.drop({("in", 1)})  # a revocation while the fetch was under way
        stale = await queue.put([Msg("in", 0, 0)], generation=before)
        fresh = await queue.put([Msg("in", 0, 0)], generation=queue.generation)
        return stale, fresh, [m.partition for m in flat(await queue.take(0.1))]

    assert asyncio.run(go()) == (False, True, [0])


def test_a_revocation_while_put_waits_for_room_refuses_the_waiting_fetch() -> None:
    async def go() -> tuple[bool, int]:
        queue = BatchQueue(["in"], max_batch=1)  # holds at most 4
        await queue.put([Msg("in", 0, o) for o in range(4)])
        waiting = asyncio.ensure_future(queue.put([Msg("in", 1, 0)], generation=queue.generation))
        await asyncio.sleep(0.02)
        queue.drop({("in", 1)})  # makes room and revokes partition 1
        accepted = await asyncio.wait_for(waiting, 1.0)
        return accepted, len(queue)

    assert asyncio.run(go()) == (False, 4)


def test_unread_keeps_records_from_the_read_offset_on() -> None:
    fetched = [Msg("in", 0, o) for o in range(5, 10)]
    assert unread(fetched, None) is fetched
    assert unread(fetched, 4) is fetched
    # after a seek Faust's read offset is the committed offset: the next record to read
    assert unread(fetched, 5) is fetched
    assert [m.offset for m in unread(fetched, 7)] == [7, 8, 9]
    assert [m.offset for m in unread(fetched, 9)] == [9]
    assert list(unread(fetched, 10)) == []
    assert unread([], 3) == []


def test_last_offsets_gives_each_partitions_highest_offset_and_count() -> None:
    runs = [
        [Msg("a", 0, 3)],
        [Msg("b", 0, 9)],
        [Msg("a", 0, 4), Msg("a", 0, 5)],
        [Msg("a", 1, 0)],
        [],
    ]
    assert last_offsets(runs) == {("a", 0): (5, 3), ("b", 0): (9, 1), ("a", 1): (0, 1)}


def test_each_run_keeps_the_clock_reading_it_was_received_at() -> None:
    """A run's stamp is the clock's reading when it was queued, kept when a batch splits it;
    ``take_now(received_before=T)`` takes only what was received before T (what a tick at T
    processes before closing)."""
    now = [10.0]

    async def go() -> tuple[list[Any], list[Any], list[Any]]:
        queue = BatchQueue(["in"], max_batch=3, clock=lambda: now[0])
        await queue.put([Msg("in", 0, o) for o in range(4)])  # received at 10
        now[0] = 20.0
        await queue.put([Msg("in", 1, 0)])  # received at 20
        before = queue.take_now(received_before=15.0)  # three records of the first run
        rest_before = queue.take_now(received_before=15.0)  # its split tail, still stamped 10
        nothing = queue.take_now(received_before=15.0)  # the run received at 20 stays
        return before, rest_before + nothing, queue.take_now()

    first, second, last = asyncio.run(go())
    assert [(len(run), stamp) for run, stamp in first] == [(3, 10.0)]
    assert [(len(run), stamp) for run, stamp in second] == [(1, 10.0)]
    assert [(m.partition, m.offset, stamp) for run, stamp in last for m in run] == [(1, 0, 20.0)]
