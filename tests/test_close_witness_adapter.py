"""The Kafka side of the close witness (streamdp.faust_internals, witness_metadata and
acknowledged_commits): commits carry the witness in their metadata, committed offsets read keep
it, and Faust's periodic commit writes a new witness at the offset already committed.

On stand-ins for aiokafka's consumer (its ``commit`` and the group coordinator's fetch of
committed offsets) and, for the commit decision, faust-streaming's own consumer as installed.
The worker on a broker is tests/test_daemon_lost_state_broker.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from faust.types import TP

from streamdp.daemon.close_witness import PREFIX, CloseWitnesses
from streamdp.faust_internals import acknowledged_commits, witness_metadata
from tests.faust_stand_in import stand_in_consumer

ORDERS = TopicPartition("orders", 1)
WITNESS = PREFIX + '{"restaurant":12}'


class _Coordinator:
    def __init__(self, held: dict[Any, OffsetAndMetadata]) -> None:
        self.held = held

    async def fetch_committed_offsets(self, partitions: list[Any]) -> dict[Any, Any]:
        return {tp: self.held[tp] for tp in partitions if tp in self.held}


class _AIOKafkaConsumer:
    """What witness_metadata touches of aiokafka's consumer: a broker that keeps commits."""

    def __init__(self, held: dict[Any, OffsetAndMetadata], *, refuse: bool = False) -> None:
        self._group_id = "app"
        self._coordinator = _Coordinator(held)
        self.refuse = refuse

    async def commit(self, offsets: dict[Any, OffsetAndMetadata]) -> None:
        if self.refuse:
            raise RuntimeError("the broker refused the commit")
        self._coordinator.held.update(offsets)

    async def committed(self, partition: Any) -> int | None:
        raise AssertionError("replaced by witness_metadata")


def _wrapped(
    held: dict[Any, OffsetAndMetadata], **kwargs: Any
) -> tuple[_AIOKafkaConsumer, CloseWitnesses]:
    consumer, witnesses = _AIOKafkaConsumer(held, **kwargs), CloseWitnesses()
    witness_metadata(consumer, witnesses)
    return consumer, witnesses


def test_a_commit_carries_the_witness_and_records_what_the_broker_took() -> None:
    held: dict[Any, OffsetAndMetadata] = {}
    consumer, witnesses = _wrapped(held)
    witnesses.to_write["orders", 1] = WITNESS
    asyncio.run(consumer.commit({ORDERS: OffsetAndMetadata(40, "")}))
    assert held[ORDERS] == OffsetAndMetadata(40, WITNESS)
    assert witnesses.on_broker["orders", 1] == WITNESS
    assert not witnesses.pending("orders", 1)


def test_a_commit_without_a_new_witness_keeps_the_groups() -> None:
    held = {ORDERS: OffsetAndMetadata(40, WITNESS)}
    consumer, witnesses = _wrapped(held)
    assert asyncio.run(consumer.committed(ORDERS)) == 40  # the assignment's seek reads it
    assert witnesses.witnessed("orders", 1) == {"restaurant": 12}
    asyncio.run(consumer.commit({ORDERS: OffsetAndMetadata(55, "")}))  # Faust writes none
    assert held[ORDERS] == OffsetAndMetadata(55, WITNESS)


def test_a_refused_commit_records_nothing() -> None:
    consumer, witnesses = _wrapped({}, refuse=True)
    witnesses.to_write["orders", 1] = WITNESS
    with pytest.raises(RuntimeError):
        asyncio.run(consumer.commit({ORDERS: OffsetAndMetadata(40, "")}))
    assert witnesses.pending("orders", 1)


def test_a_witness_at_offset_0_never_moves_a_commit_back() -> None:
    held = {ORDERS: OffsetAndMetadata(57, "")}
    consumer, witnesses = _wrapped(held)
    witnesses.to_write["orders", 1] = WITNESS
    asyncio.run(consumer.commit({ORDERS: OffsetAndMetadata(0, "")}))
    assert held[ORDERS] == OffsetAndMetadata(57, WITNESS)
    fresh: dict[Any, OffsetAndMetadata] = {}
    consumer, witnesses = _wrapped(fresh)
    witnesses.to_write["orders", 1] = WITNESS
    asyncio.run(consumer.commit({ORDERS: OffsetAndMetadata(0, "")}))  # nothing committed yet
    assert fresh[ORDERS] == OffsetAndMetadata(0, WITNESS)


def test_no_commit_reads_as_none_and_no_witness() -> None:
    consumer, witnesses = _wrapped({ORDERS: OffsetAndMetadata(-1, "")})
    assert asyncio.run(consumer.committed(ORDERS)) is None
    assert asyncio.run(consumer.committed(TopicPartition("orders", 0))) is None
    assert witnesses.witnessed("orders", 0) == {}


def _committable(committed: int | None, processed: int | None) -> tuple[dict[Any, int], Any]:
    """What Faust's commit would write for ``orders[1]`` once a new witness is waiting, the
    record of committed offsets at ``committed``, records processed through ``processed``;
    and the same after the broker took the witness."""
    tp = TP("orders", 1)
    witnesses = CloseWitnesses()

    class Assigned(FaustAIOKafkaConsumer):  # type: ignore[misc]
        def assignment(self) -> set[TP]:
            return {tp}

    async def go() -> tuple[dict[Any, int], Any]:
        with stand_in_consumer(acknowledged_commits(Assigned, witnesses), "witness") as consumer:
            if committed is not None:
                consumer._committed_offset[tp] = committed
            if processed is not None:
                consumer.acknowledge_through(tp, processed, 1)
            assert consumer._filter_committable_offsets([tp]) == {}  # nothing new yet
            witnesses.to_write["orders", 1] = WITNESS
            consumer.witness_closes(tp)
            before = consumer._filter_committable_offsets(list(consumer._acked))
            witnesses.on_broker["orders", 1] = WITNESS
            return before, consumer._filter_committable_offsets(list(consumer._acked))

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("committed", "processed", "offset"),
    [(None, None, 0), (1031, None, 1031), (1031, 1031, 1031)],
    ids=["nothing-committed", "committed-idle", "processed-to-the-commit"],
)
def test_faust_commits_a_new_witness_at_the_offset_already_committed(
    committed: int | None, processed: int | None, offset: int
) -> None:
    before, after = _committable(committed, processed)
    assert before == {TP("orders", 1): offset}
    assert after == {}  # written: nothing more to commit
