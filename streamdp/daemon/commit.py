"""The checkpoint protocol: what makes a batch's effect exactly-once on an at-least-once broker.

For one :class:`~streamdp.daemon.service.BatchOutcome`, in this order:

1. **checkpoint**: send every state write to the state table's changelog and wait until the
   broker acknowledged every one of them (the outbox entries and the hot state among them),
   within the membership lease: a lease that ends first ends the process, writes still queued
   in it included;
2. **publish** the outputs and wait until the broker acknowledged every one of them;
3. **clear the outbox** (deletions sent, not waited for: a lost deletion only re-publishes
   identical records later);
4. **observe** the batch (metrics; nothing of the protocol depends on it).

Steps 1-3 each begin by holding the worker's lease on its group membership
(:mod:`streamdp.daemon.membership_lease`), all in the generation the first one held: a worker
that may have been expelled from the group (its partitions given to a next owner that closes
the same periods with its own draws) writes nothing more and exits. Step 2 publishes only
outbox entries that step 1 made durable while the lease held, which a next owner therefore
restores and publishes identically.

An acknowledgement that fails raises out of :meth:`CheckpointCommit.commit` and stops the
protocol where it is: a failed checkpoint publishes nothing, a failed publication leaves the
outbox in place for the source's next owner to publish again. The caller acknowledges the
batch's input records only after ``commit`` returned.

The table and the topics are reached through two narrow protocols (:class:`ChangelogTable`,
:class:`OutputTopic`) so that the order can be checked with fakes
(``tests/test_commit_protocol.py``); in the worker they are Faust's table and topics
(``streamdp.daemon.app``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

from streamdp.daemon.membership_lease import MembershipLease
from streamdp.daemon.outcome import BatchOutcome
from streamdp.errors import MembershipLostError

__all__ = ["ChangelogTable", "CheckpointCommit", "OutputTopic", "kafka_seconds"]


def kafka_seconds(stamp: float | None) -> float | None:
    """``stamp`` (Unix seconds) as the seconds to hand Faust so that the record's timestamp is
    ``stamp`` to the millisecond: Faust sends ``int(seconds * 1000.0)``, and a float
    product can fall just below the whole millisecond (then the next float up is used)."""
    if stamp is None:
        return None
    millis = round(stamp * 1000.0)
    seconds = millis / 1000.0
    while int(seconds * 1000.0) < millis:
        seconds = math.nextafter(seconds, math.inf)
    return seconds


class ChangelogTable(Protocol):
    """The part of a Faust table the protocol uses: its local data and its changelog."""

    @property
    def data(self) -> MutableMapping[Any, Any]:
        """The table's local contents (kept equal to what its changelog says)."""
        ...

    def send_changelog(
        self,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> Awaitable[Any]:
        """Send one change to the changelog; the result completes when the broker acknowledged
        it (and raises if it refused it)."""
        ...


class OutputTopic(Protocol):
    """The part of a Faust topic the protocol uses: sending one record."""

    async def send(
        self, *, key: Any = None, value: Any = None, timestamp: float | None = None
    ) -> Awaitable[Any]:
        """Queue one record (``timestamp``: its Kafka timestamp in Unix seconds, None: now);
        the returned awaitable completes on the broker's acknowledgement."""
        ...


class CheckpointCommit:
    """Steps 1-4 of the checkpoint protocol for one worker (see the module docstring).

    ``outputs`` maps each output topic's name to its topic; ``observe`` receives the outcome
    and, for an input batch, the seconds from its receipt to the end of step 3; ``lease`` is
    the worker's membership lease (None: no group, as in the protocol's own tests);
    ``abandon`` ends the process at once (the worker: without flushing its producer) when the
    lease ends before step 1's writes are all acknowledged.
    """

    def __init__(
        self,
        table: ChangelogTable,
        outputs: Mapping[str, OutputTopic],
        observe: Callable[[BatchOutcome], None],
        lease: MembershipLease | None = None,
        abandon: Callable[[MembershipLostError], None] | None = None,
    ) -> None:
        self._table = table
        self._outputs = outputs
        self._observe = observe
        self._lease = lease
        self._abandon = abandon

    async def _hold_lease(self, step: str, generation: int | None) -> int | None:
        """Hold the lease for ``step`` (in ``generation``, the one an earlier step of this
        commit held); returns the generation held (None without a lease)."""
        if self._lease is None:
            return None
        return await self._lease.hold(step, generation)

    async def _durable(self, acknowledged: Awaitable[Any], step: str, held: int | None) -> None:
        """Wait until ``acknowledged`` (step 1's writes) completes, within the lease: a lease
        that ends first ends the worker at once (``abandon``), so that the writes still queued
        in the process never reach the broker after the worker may have been expelled."""
        if self._lease is None:
            await acknowledged
            return
        try:
            await self._lease.outlast(acknowledged, step, held)
        except MembershipLostError as lost:
            if self._abandon is not None:
                self._abandon(lost)
            raise

    async def commit(self, outcome: BatchOutcome) -> None:
        """Checkpoint, publish, clear the outbox, observe."""
        table = self._table
        # every step holds the lease of one generation: a commit whose group moved to another
        # between its steps stops there
        held: int | None = None
        # 1. checkpoint durable before anything derived from it leaves the process
        if outcome.writes:
            held = await self._hold_lease("a checkpoint", held)
        pending = []
        for write in outcome.writes:
            if write.value is None:
                table.data.pop(write.key, None)
                pending.append(
                    table.send_changelog(write.partition, write.key, None, value_serializer="raw")
                )
            else:
                table.data[write.key] = write.value
                pending.append(table.send_changelog(write.partition, write.key, write.value))
        if pending:
            await self._durable(asyncio.gather(*pending), "a checkpoint", held)
        # 2. publish (a tick's releases with its public instant as their timestamp)
        if outcome.publications:
            held = await self._hold_lease("a publication", held)
        sent = [
            await self._outputs[p.topic].send(
                key=p.key.encode(), value=p.value.encode(), timestamp=kafka_seconds(p.timestamp)
            )
            for p in outcome.publications
        ]
        if sent:
            await asyncio.gather(*sent)
        # 3. clear the outbox (a lost deletion only re-publishes identical records later)
        if outcome.cleanup:
            await self._hold_lease("clearing the outbox", held)
        for write in outcome.cleanup:
            table.data.pop(write.key, None)
            table.send_changelog(write.partition, write.key, None, value_serializer="raw")
        self._observe(outcome)
