"""Commits of input partitions on the stream input path (``--input-path stream``) under the race
between faust-streaming's drain loop and the recovery's seek.

When a worker starts, faust-streaming resumes its fetcher before the recovery seeks the stream
partitions to their committed offsets, and that seek (``Consumer.perform_seek``) sets the drain
loop's read offset back to the committed offset while a fetched batch may still be in delivery.
The drain loop's next record then looks like a hole after the committed offset: Faust records
the already delivered and acknowledged offsets as a gap, and its commit step later adds the gap's
offsets to the acknowledged ones a second time. Its search for the longest run of consecutive
acknowledged offsets then stops at every doubled offset: each commit advances by one offset,
about one per commit interval, however far the worker has processed.

The tests run faust-streaming's own ``_drain_messages``, ``perform_seek``, ``ack`` and
``_new_offset`` (as installed, not copies) with a stand-in for the fetch (the records of a
partition, in two fetches) and for the broker's answer to the seek, and prove:

- upstream, the commit crawls one offset per commit after that race (if a faust-streaming
  release stops doing this, the first test says so);
- on the stream path as the worker builds it (input topics declared without Faust's per-record
  acknowledgements, commits from :func:`~streamdp.faust_internals.acknowledged_commits`), one
  commit takes the partition to the offset after the last durable record, and Faust's per-record
  bookkeeping holds nothing for the partition.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from faust.types import TP
from faust.types.tuples import Message

from streamdp.daemon.faust_setup import declare_topics
from streamdp.daemon.settings import DaemonSettings
from streamdp.faust_internals import acknowledged_commits
from tests.faust_stand_in import stand_in_consumer

ORDERS = TP("orders", 1)
COMMITTED = 339  # the partition's committed offset when the worker starts
SEEK_AT = 601  # the record the drain loop is about to deliver when the recovery's seek returns
FIRST_FETCH = range(COMMITTED, 839)  # fetched before the seek
SECOND_FETCH = range(COMMITTED, 1339)  # fetched again from the committed offset after it
END = SECOND_FETCH[-1] + 1


class _Fetcher:
    def __init__(self) -> None:
        self._stopped = asyncio.Event()


def _message(offset: int) -> Message:
    return Message(
        ORDERS.topic, ORDERS.partition, offset, 0.0, 0, None, b"k", b"v", None, tp=ORDERS
    )


async def _drain_with_a_seek_mid_fetch(
    consumer_base: type, *, acking: bool
) -> tuple[Any, list[int]]:
    """A consumer (a subclass of ``consumer_base``) after faust-streaming's drain loop delivered
    the two fetches, with the recovery's seek returning just before record SEEK_AT;
    every delivered record is acknowledged as the stream's take_events does. Returns the
    consumer and the offsets delivered, in order. ``acking``: Faust's per-record
    acknowledgements are on for the topic (its default)."""
    fetcher = _Fetcher()
    fetches = [FIRST_FETCH, SECOND_FETCH]
    sought = False
    delivered: list[int] = []

    class TwoFetches(consumer_base):  # type: ignore[misc,valid-type]
        def assignment(self) -> set[TP]:
            return {ORDERS}

        async def seek_to_committed(self) -> dict[TP, int]:
            return {ORDERS: COMMITTED}  # the broker's committed offset, read by the seek

        async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
            nonlocal sought
            if not fetches:
                fetcher._stopped.set()
                return
            for offset in fetches.pop(0):
                if offset == SEEK_AT and not sought:
                    # the recovery's seek (another task) returns at one of the drain loop's
                    # yields between two records: its sleep(0) every 100 records, or here
                    sought = True
                    await self.perform_seek()
                yield ORDERS, _message(offset)

    async def deliver(message: Message) -> None:
        delivered.append(message.offset)
        consumer.ack(message)

    acking_topics = [ORDERS.topic] if acking else []
    with stand_in_consumer(
        TwoFetches, "stream-commits-test", callback=deliver, acking_topics=acking_topics
    ) as consumer:
        consumer._committed_offset[ORDERS] = COMMITTED
        await consumer._drain_messages(fetcher)
    return consumer, delivered


def _commits_until(consumer: Any, end: int, *, most: int) -> list[int]:
    """The offsets Faust's commit step would commit, one commit after another, until ``end``
    (at most ``most`` commits); each commit's offset becomes the committed one, as
    ``_commit_offsets`` records it."""
    commits: list[int] = []
    while len(commits) < most:
        offset = consumer._new_offset(ORDERS)
        if offset is None or not consumer._should_commit(ORDERS, offset):
            break
        consumer._committed_offset[ORDERS] = offset
        commits.append(offset)
        if offset >= end:
            break
    return commits


def test_upstream_a_seek_during_delivery_makes_the_commit_crawl_one_offset_at_a_time() -> None:
    consumer, delivered = asyncio.run(
        _drain_with_a_seek_mid_fetch(FaustAIOKafkaConsumer, acking=True)
    )
    # every record reached the stream (the second fetch's records below the read offset are
    # dropped by the drain loop, the one at it delivered again: the worker skips it), so the
    # worker's processing is complete
    assert sorted(set(delivered)) == list(SECOND_FETCH)
    commits = _commits_until(consumer, END, most=1000)
    assert commits[-1] == END, commits[-5:]
    # the offsets recorded as a gap after the seek (COMMITTED+1 .. SEEK_AT) were acknowledged
    # twice: one commit per offset through them
    crawl = [b - a for a, b in itertools.pairwise(commits)]
    assert len(commits) > SEEK_AT - COMMITTED - 5, commits[:10]
    assert crawl[: SEEK_AT - COMMITTED - 5] == [1] * (SEEK_AT - COMMITTED - 5)


def test_the_stream_path_commits_the_durable_offset_in_one_commit_after_the_same_race() -> None:
    consumer, delivered = asyncio.run(
        _drain_with_a_seek_mid_fetch(acknowledged_commits(FaustAIOKafkaConsumer), acking=False)
    )
    assert sorted(set(delivered)) == list(SECOND_FETCH)
    # the batch driver, once the checkpoint protocol returned for the last batch
    consumer.acknowledge_through(ORDERS, END, len(delivered))
    assert _commits_until(consumer, END, most=1000) == [END]
    # Faust kept no per-record acknowledgements or gaps for the partition: nothing grows
    assert consumer._acked[ORDERS] == []
    assert not consumer._gap.get(ORDERS)


def test_the_stream_path_declares_its_input_topics_without_per_record_acknowledgements(
    tmp_path: Any,
) -> None:
    settings = DaemonSettings(config=tmp_path / "job.toml", input_path="stream", data_dir=tmp_path)
    app = faust.App("stream-commits-topics", broker="kafka://127.0.0.1:9")
    topics = declare_topics(app, settings, ["orders", "control"])
    assert topics.inputs.acks is False
    assert all(topic.acks for topic in topics.outputs.values())


def test_acknowledgements_in_a_revocation_leave_nothing_to_commit_of_partitions_given_away() -> (
    None
):
    kept, given_away = TP("orders", 0), TP("orders", 1)

    async def rebalance() -> dict[TP, int]:
        held = {kept, given_away}

        class Assigned(acknowledged_commits(FaustAIOKafkaConsumer)):  # type: ignore[misc]
            def assignment(self) -> set[TP]:
                return set(held)

        with stand_in_consumer(Assigned, "stream-commits-rebalance") as consumer:
            consumer.acknowledge_through(kept, 10, 10)
            consumer.acknowledge_through(given_away, 20, 20)
            await consumer.on_partitions_revoked({kept, given_away})
            # the revocation hook settles the batch in flight: its acknowledgements arrive
            # while the old assignment still holds both partitions
            consumer.acknowledge_through(kept, 15, 5)
            consumer.acknowledge_through(given_away, 30, 10)
            held.discard(given_away)
            await consumer.on_partitions_assigned({kept})
            consumer.acknowledge_through(kept, 40, 25)  # the next batch of the kept partition
            return dict(
                consumer._filter_committable_offsets(consumer._filter_tps_with_pending_acks())
            )

    # before: {orders[0]: 40, orders[1]: 30}, orders[1] tried (and discarded) at every commit
    assert asyncio.run(rebalance()) == {kept: 40}
