"""The batch input path's drain loop under a rebalance that completes while a fetch waits.

The loop (:func:`streamdp.faust_internals.batching_consumer`) reads the batch queue's generation
before it waits for a fetch, and the queue refuses the fetch's records when partitions were
revoked since (:meth:`~streamdp.daemon.batch_input.BatchQueue.put`): a fetch made under the old
assignment must not slip in behind the revocation. But a whole rebalance can run while the loop
waits: the revocation (the queue drops its runs), the new assignment keeping the partition, and
the recovery's seek to the committed offset. The fetch then returns records read from the
committed offset *after* that seek, the queue refuses them, and the client's position is already
past them: nothing reads them again. The worker saw it as a hole at the next fetch ("jumped past
records below the reader") and exited with 75 (benchmarks/results/scale_out.md: one of five
scale-out runs, when the second worker joined).

The tests run the installed faust-streaming consumer with the loop as the worker builds it and a
stand-in for one partition's log and client position (a fetch returns records from the position
and moves it; the seek moves it to the committed offset), and check that every record from the
committed offset to the end reaches the queue after the rebalance, and that a read offset of
Faust's left ahead of the position (a queued run dropped, the position moved back without it)
leaves no record out: the loop does not filter input records by it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from faust.types import TP

from streamdp.daemon.batch_input import BatchQueue
from streamdp.faust_internals import batching_consumer
from tests.faust_stand_in import stand_in_consumer

ORDERS = TP("orders", 1)
COMMITTED = 100  # the partition's committed offset: the rebalance's seek goes back there
END = 400  # the partition's log end
FETCH = 50  # records per fetch


class _Fetcher:
    def __init__(self) -> None:
        self._stopped = asyncio.Event()


def _record(offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(ORDERS.topic, ORDERS.partition, offset, 0, 0, b"k", b"v", None, 1, 1, ())


async def _drain(
    *,
    rebalance_before_fetch_at: int,
    fetched_before_the_seek: bool,
    committed: int | None,
    read_offset: int | None = None,
) -> list[int]:
    """The offsets left in the queue after the drain loop read the partition to its end, with
    a rebalance (revocation, same partition assigned again, the recovery's seek) during the
    wait for the fetch at ``rebalance_before_fetch_at``. ``fetched_before_the_seek``: that
    fetch's records were read under the old assignment (the seek comes after the fetch
    returned, as the next fetch begins), else after the seek. ``committed``: the group's
    committed offset (None: nothing committed, a new group; the seek to the committed offsets
    then leaves the position alone, as aiokafka's does, and the new assignment's position
    starts at the log start, 0, by the offset reset "earliest"). ``read_offset``: Faust's read
    offset of the partition when the loop starts (default: the committed offset)."""
    fetcher = _Fetcher()
    queue = BatchQueue([ORDERS.topic], max_batch=10_000)
    start_at = 0 if committed is None else committed
    position = start_at
    pending_seek = False
    raced = False

    class OnePartition(batching_consumer(FaustAIOKafkaConsumer, queue)):  # type: ignore[misc]
        def assignment(self) -> set[TP]:
            return {ORDERS}

        async def seek_to_committed(self) -> dict[TP, int | None]:
            nonlocal position
            if committed is not None:  # aiokafka seeks offsets above 0 only
                position = committed
            return {ORDERS: committed}

        async def assign_and_seek(self) -> None:
            """The new assignment (keeping the partition) and the recovery's seek."""
            nonlocal position
            if committed is None:
                position = 0  # a new assignment's position: the offset reset, "earliest"
            await self.perform_seek()

        async def _seek(self, partition: TP, offset: int) -> None:
            nonlocal position
            assert partition == ORDERS
            position = offset

        async def _wait_next_records(self, timeout: float) -> tuple[dict[TP, Any], set[TP]]:
            nonlocal position, pending_seek, raced
            if pending_seek:  # the new assignment, after the stale fetch was returned
                pending_seek = False
                await self.assign_and_seek()
            if position >= END:
                fetcher._stopped.set()
                return {}, {ORDERS}
            if not raced and position >= rebalance_before_fetch_at:
                raced = True
                queue.drop({(ORDERS.topic, ORDERS.partition)})  # the revocation hook
                self.app.consumer_generation_id += 1
                if fetched_before_the_seek:
                    pending_seek = True
                else:
                    await self.assign_and_seek()
            start = position
            position = min(start + FETCH, END)
            return {ORDERS: [_record(o) for o in range(start, position)]}, {ORDERS}

    with stand_in_consumer(OnePartition, "batch-drain-test") as consumer:
        consumer._read_offset[ORDERS] = committed if read_offset is None else read_offset
        await asyncio.wait_for(consumer._drain_messages(fetcher), timeout=30)
    return [record.offset for run, _ in queue.take_now() for record in run]


@pytest.mark.parametrize("committed", [COMMITTED, None], ids=["committed", "none-committed"])
@pytest.mark.parametrize(
    "fetched_before_the_seek", [False, True], ids=["fetched-after-seek", "fetched-before-seek"]
)
def test_records_a_rebalance_kept_from_the_queue_are_fetched_again(
    committed: int | None, fetched_before_the_seek: bool
) -> None:
    queued = asyncio.run(
        _drain(
            rebalance_before_fetch_at=250,
            fetched_before_the_seek=fetched_before_the_seek,
            committed=committed,
        )
    )
    # the runs queued before the revocation were dropped with it; a fetch read after the
    # rebalance's seek is refused by the queue and fetched again (the loop seeks back to where
    # the rebalance had set the position), and a stale fetch (offsets 250-299, read under the
    # old assignment) is not queued behind the revocation: either way the queue holds the
    # partition from where the new assignment begins, in order, once
    begin = 0 if committed is None else committed
    assert queued == list(range(begin, END)), _described(queued, begin)


def _described(offsets: list[int], begin: int) -> str:
    missing = sorted(set(range(begin, END)) - set(offsets))
    holes = f"missing {missing[:3]}...{missing[-3:]} ({len(missing)})" if missing else "none"
    return f"{holes}; queued {offsets[:3]}...{offsets[-3:]} ({len(offsets)})"


def test_a_read_offset_left_ahead_of_the_position_loses_no_record() -> None:
    # Faust's read offset at 249 while the client's position is at the committed offset, 100:
    # a run up to 249 was queued, the queue dropped it at a revocation, and the position went
    # back without the read offset (the two move in separate steps of Faust and aiokafka). A
    # loop that leaves out records below the read offset, as Faust's own does, loses 100-248
    # for good; the batch loop queues every record the client returns (the release service
    # skips those it applied already)
    queued = asyncio.run(
        _drain(
            rebalance_before_fetch_at=END,  # no rebalance
            fetched_before_the_seek=False,
            committed=COMMITTED,
            read_offset=249,
        )
    )
    assert queued == list(range(COMMITTED, END)), _described(queued, COMMITTED)


def test_the_loop_does_not_seek_while_a_rebalance_has_the_flow_suspended() -> None:
    # records returned while the flow is suspended (a revocation under way) are left to the
    # rebalance's own seek; a seek of the loop's then asks for the old assignment's committed
    # offsets and fails half-way when the assignment changes (a WARNING at every rebalance)
    seeks_while_suspended = []

    async def run() -> None:
        queue = BatchQueue([ORDERS.topic], max_batch=10_000)
        fetcher = _Fetcher()
        calls = 0

        class Suspended(batching_consumer(FaustAIOKafkaConsumer, queue)):  # type: ignore[misc]
            def assignment(self) -> set[TP]:
                return {ORDERS}

            async def seek_to_committed(self) -> dict[TP, int | None]:
                seeks_while_suspended.append(not self.flow_active)
                return {ORDERS: COMMITTED}

            async def _wait_next_records(self, timeout: float) -> tuple[dict[TP, Any], set[TP]]:
                nonlocal calls
                calls += 1
                if calls == 1:
                    self.stop_flow()  # the revocation began while this fetch was out
                    return {ORDERS: [_record(o) for o in range(COMMITTED, 150)]}, {ORDERS}
                fetcher._stopped.set()
                return {}, {ORDERS}

        with stand_in_consumer(Suspended, "batch-drain-suspended") as consumer:
            await asyncio.wait_for(consumer._drain_messages(fetcher), timeout=30)
        assert len(queue) == 0  # nothing of the suspended fetch was queued

    asyncio.run(run())
    assert seeks_while_suspended == []
