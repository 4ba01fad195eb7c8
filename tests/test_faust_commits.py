"""faust-streaming's record of committed offsets against what the broker took
(``streamdp.faust_internals.honest_commits``).

faust-streaming 0.15's ``Consumer._commit_offsets`` (run here as installed, not a copy) writes
the offsets it tried into its record (``_committed_offset``) whether the broker took them or
not, and commits a partition only past that record. The tests run it with a stand-in for the
one step that talks to the broker (``_commit``, which also plays the rebalance that can run
while a commit is out) and prove:

- upstream, a refused commit and a commit overtaken by a rebalance both leave the record ahead
  of the broker, so the partition's last offsets are never committed (if a faust-streaming
  release stops doing this, these tests say so and the adapter can go);
- with ``honest_commits`` the record keeps what the broker has: the old offset after a refusal,
  the offset the rebalance's seek read from the broker after a rebalance, and the offsets of an
  accepted commit otherwise; the partition is then committed again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from faust.types import TP

from streamdp.faust_internals import honest_commits
from tests.faust_stand_in import stand_in_consumer

ORDERS = TP("orders", 1)
FIRST_COMMIT = 1031  # what the broker has: the partition's last commit it took
END = 60265  # the commit the test makes: the partition's end


class _Producer:
    async def flush(self) -> None:
        return None


def _one_broker_step(
    broker_step: Callable[[Any, dict[TP, int]], Awaitable[bool]], *, honest: bool
) -> type:
    """A Faust aiokafka consumer class (upstream ``_commit_offsets``) whose broker step is
    ``broker_step(consumer, offsets)``; with ``honest``, under ``honest_commits``."""

    class OneBrokerStep(FaustAIOKafkaConsumer):  # type: ignore[misc]
        def assignment(self) -> set[TP]:
            return {ORDERS}

        async def _commit(self, offsets: Any) -> bool:
            return await broker_step(self, dict(offsets))

        # Faust's own revoke and assign do this to the record (and call into the app)
        async def on_partitions_revoked(self, revoked: set[TP]) -> None:
            for tp in revoked:
                self._committed_offset.pop(tp, None)

        async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
            return None

    return honest_commits(OneBrokerStep) if honest else OneBrokerStep


async def _refused(_consumer: Any, _offsets: dict[TP, int]) -> bool:
    """The broker refused: the group rebalanced (aiokafka's CommitFailedError, which
    faust-streaming's driver turns into False)."""
    return False


async def _accepted(_consumer: Any, _offsets: dict[TP, int]) -> bool:
    return True


def _overtaken_by_a_rebalance(accepted: bool) -> Callable[[Any, dict[TP, int]], Awaitable[bool]]:
    """A rebalance runs while the commit is out: the partition is revoked and assigned again,
    and the recovery's seek reads the record from the broker (which has FIRST_COMMIT)."""

    async def step(consumer: Any, _offsets: dict[TP, int]) -> bool:
        await consumer.on_partitions_revoked({ORDERS})
        await consumer.on_partitions_assigned({ORDERS})
        consumer._committed_offset[ORDERS] = FIRST_COMMIT  # perform_seek, from the broker
        return accepted

    return step


def _commit_end(
    broker_step: Callable[[Any, dict[TP, int]], Awaitable[bool]], *, honest: bool
) -> tuple[Any, bool]:
    """The consumer after it committed END through ``broker_step`` (the record at
    FIRST_COMMIT before), and what the commit returned."""

    async def go() -> tuple[Any, bool]:
        cls = _one_broker_step(broker_step, honest=honest)
        with stand_in_consumer(cls, "honest-commits-test") as consumer:
            consumer.app._producer = _Producer()
            consumer._committed_offset[ORDERS] = FIRST_COMMIT
            return consumer, bool(await consumer._commit_offsets({ORDERS: END}))

    return asyncio.run(go())


@pytest.mark.parametrize(
    "broker_step",
    [_refused, _overtaken_by_a_rebalance(False)],
    ids=["refused", "overtaken-by-a-rebalance"],
)
def test_upstream_a_commit_the_broker_did_not_take_moves_the_record_past_the_broker(
    broker_step: Callable[[Any, dict[TP, int]], Awaitable[bool]],
) -> None:
    consumer, did_commit = _commit_end(broker_step, honest=False)
    assert did_commit is False
    assert consumer._committed_offset[ORDERS] == END  # the broker has FIRST_COMMIT
    # and faust-streaming will not commit the partition's end again
    assert not consumer._should_commit(ORDERS, END)


@pytest.mark.parametrize(
    "broker_step",
    [_refused, _overtaken_by_a_rebalance(False), _overtaken_by_a_rebalance(True)],
    ids=["refused", "overtaken-by-a-rebalance", "accepted-then-overtaken"],
)
def test_honest_commits_keep_the_record_at_what_the_broker_has(
    broker_step: Callable[[Any, dict[TP, int]], Awaitable[bool]],
) -> None:
    consumer, _ = _commit_end(broker_step, honest=True)
    assert consumer._committed_offset[ORDERS] == FIRST_COMMIT
    assert consumer._should_commit(ORDERS, END)  # the end is committed again


def test_honest_commits_take_an_accepted_commit_as_upstream_does() -> None:
    consumer, did_commit = _commit_end(_accepted, honest=True)
    assert did_commit is True
    assert consumer._committed_offset[ORDERS] == END
    assert not consumer._should_commit(ORDERS, END)


def test_a_partition_revoked_during_a_refused_commit_has_no_record_afterwards() -> None:
    async def revoked_for_good(consumer: Any, _offsets: dict[TP, int]) -> bool:
        await consumer.on_partitions_revoked({ORDERS})
        return False

    consumer, _ = _commit_end(revoked_for_good, honest=True)
    assert ORDERS not in consumer._committed_offset
