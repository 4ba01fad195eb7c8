"""The batch input queue between Faust's consumer and the release service: order, batch size,
back-pressure and dropping a revoked partition's records (which are never acknowledged)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from streamdp.daemon.batch_input import BatchQueue


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int


def test_take_returns_fetch_order_in_batches_of_at_most_max_batch() -> None:
    async def go() -> list[list[int]]:
        queue = BatchQueue(["in"], max_batch=3)
        await queue.put([Msg("in", 0, o) for o in range(5)])
        first = await queue.take(0.1)
        second = await queue.take(0.1)
        empty = await queue.take(0.05)
        return [[m.offset for m in b] for b in (first, second, empty)]

    assert asyncio.run(go()) == [[0, 1, 2], [3, 4], []]


def test_put_waits_while_the_queue_is_full_until_a_batch_is_taken() -> None:
    async def go() -> tuple[bool, bool, int]:
        queue = BatchQueue(["in"], max_batch=2)  # holds at most 8
        await queue.put([Msg("in", 0, o) for o in range(8)])
        blocked = asyncio.ensure_future(queue.put([Msg("in", 0, 8)]))
        await asyncio.sleep(0.05)
        waited = not blocked.done()
        await queue.take(0.1)
        await asyncio.wait_for(blocked, 1.0)
        return waited, blocked.done(), len(queue)

    assert asyncio.run(go()) == (True, True, 7)


def test_drop_forgets_only_the_revoked_partitions() -> None:
    async def go() -> list[tuple[int, int]]:
        queue = BatchQueue(["in"], max_batch=10)
        await queue.put([Msg("in", p, o) for o in range(3) for p in (0, 1)])
        assert queue.drop({("in", 1)}) == 3
        return [(m.partition, m.offset) for m in await queue.take(0.1)]

    assert asyncio.run(go()) == [(0, 0), (0, 1), (0, 2)]
