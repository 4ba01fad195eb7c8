"""A batch-level input path for the worker's input topics (``--input-path batch``, the default).

faust-streaming hands every fetched record to its agents one at a time: a pair of asyncio tasks
per record in the consumer's drain loop, a Message and an Event object, a channel queue, stream
iteration and a per-record acknowledgement, about 100 µs per record, an order of magnitude more
than the release service needs. This module keeps Faust for everything else (group membership,
partition assignment, the changelog-backed state table, recovery, offset commits, the web server)
and changes only how records of the input topics reach the service and how they are
acknowledged:

* the consumer's drain loop puts each fetch's input records, as aiokafka returned them and one
  run per partition, into a :class:`BatchQueue` (no per-record work on the way);
* the worker's batch task takes runs holding up to ``max_batch`` records, runs the checkpoint
  protocol on them and then calls :meth:`acknowledge_through` once per partition: the offsets
  up to there become committable in Faust's next commit, in place of Faust's per-record
  acknowledgements.

Records of every other topic (changelog recovery, standbys) keep Faust's own per-record delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from streamdp.daemon.routing import InputLike


def unread(records: Sequence[Any], read_offset: int | None) -> Sequence[Any]:
    """The records of one partition's fetch from ``read_offset`` on: Faust's own filter, which
    the batch drain loop keeps for the records of other topics than the inputs (the control
    topic, changelogs) and no longer applies to input records, which it queues whole (the
    release service's applied offsets skip those applied before, while a read offset left
    ahead of the records queued would lose the ones between).

    Faust's ``read_offset`` is the last offset read, or after a seek the committed offset, which
    is the next one to read: like Faust, records at ``read_offset`` itself are kept.
    """
    if records and read_offset is not None and records[0].offset < read_offset:
        return [r for r in records if r.offset >= read_offset]
    return records


class BatchQueue:
    """Runs of input records, in fetch order, waiting for the batch task (bounded).

    A run is one partition's records of one fetch, in offset order, as aiokafka returned them;
    batches are lists of runs, so the worker's per-batch work (routing, acknowledgement) is per
    run and only the release service touches every record.

    Each run is stamped with the public clock's reading when it is queued (``clock``): its
    records were *received* then, whatever batch they are processed in. A record is judged at
    its own Kafka timestamp; the receipt decides only whether it came before its period's
    release (``ReleaseService.process_runs``), and a tick first processes the runs received
    before its instant. (When a fetch is queued does depend on the records in front: their
    processing holds the event loop, a full queue makes it wait; docs/architecture.md.)

    ``generation`` counts :meth:`drop` calls (revocations): a fetch made before a revocation is
    not queued after it (:meth:`put` refuses it), so no revoked partition's record slips in
    behind the drop.
    """

    def __init__(
        self, topics: Iterable[str], max_batch: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.topics = frozenset(topics)
        self.max_batch = max_batch
        self.limit = 4 * max_batch
        self.clock = clock
        self.generation = 0
        self._runs: deque[tuple[Sequence[Any], float]] = deque()
        self._count = 0
        self._arrived: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._arrived is None or self._drained is None:
            self._arrived, self._drained = asyncio.Event(), asyncio.Event()
        return self._arrived, self._drained

    def __len__(self) -> int:
        """Records queued."""
        return self._count

    async def put(self, run: Sequence[Any], *, generation: int | None = None) -> bool:
        """Add one partition's records of one fetch, in offset order, stamped with the clock's
        reading now (waits while the queue holds ``4 * max_batch`` records or more).

        With ``generation`` (the value read when the fetch was made), records are refused, and
        False returned, if partitions were revoked since: they are never acknowledged, and the
        partitions' next owner reads them again from the committed offset.
        """
        arrived, drained = self._events()
        while True:
            if generation is not None and generation != self.generation:
                return False
            if self._count < self.limit:
                break
            drained.clear()
            await drained.wait()
        if run:
            self._runs.append((run, self.clock()))
            self._count += len(run)
            arrived.set()
        return True

    async def wait(self, within: float) -> bool:
        """Wait at most ``within`` seconds for a record; True when one is queued."""
        arrived, _ = self._events()
        if self._runs:
            return True
        arrived.clear()
        try:
            await asyncio.wait_for(arrived.wait(), timeout=within)
        except TimeoutError:
            return False
        return bool(self._runs)

    def take_now(self, received_before: float | None = None) -> list[tuple[Sequence[Any], float]]:
        """Runs holding up to ``max_batch`` records in all (the last one split if need be,
        both parts keeping its stamp), each with its stamp, at once; with ``received_before``,
        only runs stamped before that reading (a tick's instant: what arrived before it)."""
        runs = self._runs
        room = self.max_batch
        batch: list[tuple[Sequence[Any], float]] = []
        while runs and room > 0:
            run, stamp = runs[0]
            if received_before is not None and stamp >= received_before:
                break
            runs.popleft()
            if len(run) > room:
                runs.appendleft((run[room:], stamp))
                run = run[:room]
            batch.append((run, stamp))
            room -= len(run)
        taken = self.max_batch - room
        if taken:
            self._count -= taken
            self._events()[1].set()
        return batch

    async def take(self, within: float) -> list[Sequence[Any]]:
        """Runs holding up to ``max_batch`` records in all (the last one split if need be);
        waits at most ``within`` seconds for the first record (their stamps dropped)."""
        if not await self.wait(within):
            return []
        return [run for run, _ in self.take_now()]

    def drop(self, partitions: set[tuple[str, int]]) -> int:
        """Forget queued records of revoked partitions (unacknowledged: the new owner reads them
        again from the committed offset). Returns how many were dropped."""
        self.generation += 1
        kept = [
            (run, stamp)
            for run, stamp in self._runs
            if (run[0].topic, run[0].partition) not in partitions
        ]
        dropped = self._count - sum(len(run) for run, _ in kept)
        self._runs = deque(kept)
        self._count -= dropped
        if self._drained is not None:
            self._drained.set()
        return dropped


def last_offsets(runs: Iterable[Sequence[InputLike]]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per (topic, partition): the highest offset in ``runs`` and how many records there are
    (each run is one partition's records in offset order)."""
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for run in runs:
        if not run:
            continue
        key = (run[0].topic, run[0].partition)
        last = run[-1].offset
        seen = ends.get(key)
        ends[key] = (last, len(run)) if seen is None else (max(seen[0], last), seen[1] + len(run))
    return ends
