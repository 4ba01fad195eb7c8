"""A batch-level input path for the worker's input topics (``--input-path batch``).

faust-streaming hands every fetched record to its agents one at a time: a pair of asyncio tasks
per record in the consumer's drain loop, an Event object, a channel queue, stream iteration and a
per-event acknowledgement, about 100 µs per record, an order of magnitude more than the release
service needs. This module keeps Faust for everything else (group membership, partition
assignment, the changelog-backed state table, recovery, commits, the web server) and changes only
how records of the input topics reach the service: the consumer's drain loop puts them, per
fetch, into a :class:`BatchQueue`; the worker's batch task takes up to ``max_batch`` records,
runs the same checkpoint protocol as the agent path, and only then acknowledges them to Faust's
consumer (which commits acknowledged offsets as usual).

Records of every other topic (changelog recovery) keep Faust's own delivery.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Any


class BatchQueue:
    """Records of the input topics, in fetch order, waiting for the batch task (bounded)."""

    def __init__(self, topics: Iterable[str], max_batch: int) -> None:
        self.topics = frozenset(topics)
        self.max_batch = max_batch
        self.limit = 4 * max_batch
        self._records: deque[Any] = deque()
        self._arrived: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._arrived is None or self._drained is None:
            self._arrived, self._drained = asyncio.Event(), asyncio.Event()
        return self._arrived, self._drained

    def __len__(self) -> int:
        return len(self._records)

    async def put(self, records: list[Any]) -> None:
        """Add one fetch's records; waits while the queue holds more than ``4 * max_batch``."""
        arrived, drained = self._events()
        while len(self._records) >= self.limit:
            drained.clear()
            await drained.wait()
        self._records.extend(records)
        arrived.set()

    async def take(self, within: float) -> list[Any]:
        """Up to ``max_batch`` records; waits at most ``within`` seconds for the first one."""
        arrived, drained = self._events()
        if not self._records:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), timeout=within)
            except TimeoutError:
                return []
        n = min(self.max_batch, len(self._records))
        batch = [self._records.popleft() for _ in range(n)]
        drained.set()
        return batch

    def drop(self, partitions: set[tuple[str, int]]) -> int:
        """Forget queued records of revoked partitions (unacknowledged: the new owner reads them
        again from the committed offset). Returns how many were dropped."""
        kept = [m for m in self._records if (m.topic, m.partition) not in partitions]
        dropped = len(self._records) - len(kept)
        self._records = deque(kept)
        if self._drained is not None:
            self._drained.set()
        return dropped


def batching_consumer(base: type, queue: BatchQueue) -> type:
    """A subclass of Faust's transport consumer ``base`` whose drain loop routes input-topic
    records to ``queue`` per fetch instead of one by one through Faust's conductor."""

    class BatchingConsumer(base):  # type: ignore[misc]
        async def _drain_messages(self, fetcher: Any) -> None:
            read_offset = self._read_offset
            callback = self.callback
            topics = queue.topics
            try:
                while not (self._stopped.is_set() or fetcher._stopped.is_set()):
                    await asyncio.sleep(0)
                    if self.should_stop:
                        break
                    pending: list[Any] = []
                    async for tp, message in self.getmany(timeout=1.0):
                        last = read_offset[tp]
                        if last is not None and message.offset < last:
                            continue  # already read
                        if self.suspend_flow.is_set():
                            break  # a rebalance: records are fetched again after it
                        if (
                            last
                            and message.offset - last > 1
                            and self.app.topics.acks_enabled_for(message.topic)
                        ):
                            await self._add_gap(tp, last + 1, message.offset)
                        if message.topic in topics:
                            self.track_message(message)
                            pending.append(message)
                        else:
                            await self.wait_first(callback(message), self.suspend_flow.wait())
                        read_offset[tp] = message.offset
                    if pending:
                        await queue.put(pending)
                    commit_every = self._commit_every
                    if commit_every is not None and self._n_acked >= commit_every:  # type: ignore[has-type]
                        self._n_acked = 0
                        await self.commit()
            except self.consumer_stopped_errors:
                if self.transport.app.should_stop:
                    return
                raise
            except asyncio.CancelledError:
                if self.transport.app.should_stop:
                    return
                raise

    BatchingConsumer.__name__ = f"Batching{base.__name__}"
    return BatchingConsumer
