"""Every private attribute of faust-streaming and aiokafka that streamdp touches, in one module.

faust-streaming and aiokafka are pinned (``pyproject.toml``); the worker depends on a few of
their internals, and each one is named here and checked by ``tests/test_faust_contract.py``
against the installed packages (a changed signature, a missing attribute or an edited upstream
``_drain_messages`` fails that test, not a worker in production). Nothing else in the package
reads a private attribute of either library.

- :func:`tuned_fetching`: the worker's consumer long-polls at most ``--fetch-wait`` (below),
  and the group coordinator's answers to its heartbeats renew the membership lease
  (:func:`lease_renewals`).
- :func:`acknowledged_commits`: commits of input partitions take the offsets the release
  service made durable, not Faust's per-record acknowledgements (below); both input paths.
- :func:`batching_consumer`: input-topic records go to the batch queue one fetch at a time.
- :func:`honest_commits`: Faust's record of committed offsets holds only offsets the broker
  accepted (below).
- :func:`witness_metadata`: commits of input partitions carry the close witness
  (:mod:`streamdp.daemon.close_witness`), and the committed offsets read keep it.
- :func:`fetch_view`: what the aiokafka client knows of one partition (the stall watchdog).
- :func:`note_skipped_offsets`: the offsets aiokafka passes over while reading a fetch
  (transaction markers, compacted records), so that such holes are not taken for lost records
  (:mod:`streamdp.daemon.skipped_offsets`).
- :func:`committed_offset`, :func:`broker_committed_offsets`, :func:`replace_crash_handler`,
  :func:`cluster_metadata`.

Honest commits. faust-streaming 0.15 keeps, per partition, the offset it last committed
(``Consumer._committed_offset``); it commits a partition only past that offset, and the stall
watchdog reads it. ``Consumer._commit_offsets`` writes the offsets it tried into that record
whether or not the broker took them: after a commit refused because the group rebalanced
(``did_commit`` false), and after a rebalance that ran while the commit was out, in which the
partition's record was re-read from the broker (the recovery's seek) and is then overwritten.
From then on Faust believes the partition committed further than the broker does: it commits
nothing more of it until records past that offset are acknowledged, and the broker's committed
offset (the one the partition's next owner resumes from, and the group's lag) stays behind.
``honest_commits`` puts back the record as it stood when the commit returned unless the broker
accepted the commit and no rebalance began while it was out.

Acknowledged commits. faust-streaming 0.15 commits, per partition, the end of the longest run
of consecutive acknowledged offsets, after adding the offsets of any *gap* its drain loop saw
(a record whose offset jumps past the loop's read offset). When a worker starts, Faust resumes
its fetcher before the recovery's seek to the committed offsets, and the seek sets the read
offset back while a fetch may still be in delivery: the next record looks like a jump, records
already delivered and acknowledged are recorded as a gap, and at the commit their offsets count
twice. The run search then ends at every doubled offset, so each commit advances one offset,
about one a second, however far the worker got (``tests/test_faust_stream_commits.py`` runs
Faust's own loop into this). The input topics are therefore declared without Faust's per-record
acknowledgements (``acks=False``) and their commits take the offset after the last record the
release service made durable, given by the batch driver through ``acknowledge_through``.

Fetch wait. How long the worker's Kafka consumer long-polls: 0.1 s instead of Faust's 1.5 s.

faust-streaming builds its aiokafka consumer with ``fetch_max_wait_ms=1500``. A broker answers a
fetch early only when data arrives on a partition named in the request, and aiokafka sends
nothing else to a broker while a fetch to it is outstanding. Two things then wait up to 1.5 s:

* a worker that is busy with a backlog on one partition while the others are idle: when the
  backlogged partition's fetched records wait for the worker longer than aiokafka's
  ``prefetch_backoff`` (0.1 s), aiokafka sends a fetch for the idle partitions alone, and the
  backlogged partition's next fetch waits behind that long-poll. On the embedded broker the
  queue of fetched records ran empty for 1.1-1.3 s about every 75,000 records this way;
* on a broker that does not answer early when data lands on one of several partitions (Tansu),
  every record that arrives while the worker is caught up (period-close latency).

The worker's ``fetch_wait_seconds`` (``--fetch-wait``, default 0.1 s) replaces it: an idle
worker sends ten small fetches a second per broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import Any

from aiokafka import TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import (
    ConsumerStoppedError,
    IllegalGenerationError,
    IllegalOperation,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from aiokafka.structs import OffsetAndMetadata

from streamdp.daemon.batch_input import BatchQueue, unread
from streamdp.daemon.close_witness import CloseWitnesses
from streamdp.daemon.membership_lease import MembershipLease
from streamdp.daemon.skipped_offsets import SkippedOffsets
from streamdp.daemon.stall_watch import FetchView

#: Kafka API keys of the group requests whose answers renew the membership lease
HEARTBEAT_API_KEY = 12
SYNC_GROUP_API_KEY = 14
#: the request that takes the member out of the group (it ends the lease before it is sent)
LEAVE_GROUP_API_KEY = 13
#: error codes of those answers: none, and "rebalance in progress" (still a member)
NO_ERROR = 0
REBALANCE_IN_PROGRESS = RebalanceInProgressError.errno
#: Kafka's FENCED_INSTANCE_ID (static membership; aiokafka has no class for it)
FENCED_INSTANCE_ID = 82
#: error codes that say the member is not (or no longer) in the request's generation
NOT_A_MEMBER = frozenset(
    {UnknownMemberIdError.errno, IllegalGenerationError.errno, FENCED_INSTANCE_ID}
)


def lease_renewals(consumer: Any, lease: MembershipLease) -> None:
    """Renew ``lease`` with every heartbeat and SyncGroup request the group coordinator of
    aiokafka ``consumer`` answers without error or with "rebalance in progress", stamped with
    the moment the request was sent (its generation is the request's); end it when one is
    answered with an error that says the member is out of that generation (:data:`NOT_A_MEMBER`)
    and before a LeaveGroup is sent (aiokafka leaves when the consumer was not polled for
    ``max.poll.interval``, and at close). Wraps the instance's client ``send``
    (``AIOKafkaClient.send``), through which aiokafka's group coordinator sends every request
    (``GroupCoordinator._send_req``), in the consumer's own thread."""
    client = consumer._client
    send = client.send

    async def send_and_renew(node_id: Any, request: Any, **kwargs: Any) -> Any:
        key = getattr(request, "API_KEY", None)
        if key == LEAVE_GROUP_API_KEY:
            lease.end()  # the coordinator may drop the member as soon as it receives this
            return await send(node_id, request, **kwargs)
        if key not in (HEARTBEAT_API_KEY, SYNC_GROUP_API_KEY):
            return await send(node_id, request, **kwargs)
        sent = time.monotonic()
        response = await send(node_id, request, **kwargs)
        code = getattr(response, "error_code", None)
        generation = request._generation_id
        if code == NO_ERROR:
            lease.renew(generation, sent)
        elif code == REBALANCE_IN_PROGRESS and key == HEARTBEAT_API_KEY:
            lease.renew(generation, sent, rebalancing=True)
        elif code in NOT_A_MEMBER:
            lease.end(generation)
        return response

    client.send = send_and_renew


def witness_metadata(consumer: Any, witnesses: CloseWitnesses) -> None:
    """Commits of aiokafka ``consumer`` carry ``witnesses``' close witness of each partition as
    their metadata (Faust commits with none), and every committed offset it reads (the
    recovery's seek, the stall watchdog's question) records the group's metadata in
    ``witnesses.on_broker``, as does every commit the broker accepts (see
    :mod:`streamdp.daemon.close_witness`). Wraps the instance's ``commit`` and ``committed``,
    in the consumer's own thread; ``committed`` asks the group coordinator as aiokafka's own
    does (``GroupCoordinator.fetch_committed_offsets``), keeping the metadata it drops."""
    commit = consumer.commit

    async def commit_with_witness(offsets: Any = None) -> None:
        if offsets is None:
            await commit()
            return
        written = {}
        for tp, value in offsets.items():
            offset, metadata = (value, "") if isinstance(value, int) else value
            written[tp] = OffsetAndMetadata(
                offset, witnesses.metadata_for(tp.topic, tp.partition, metadata)
            )
        # offset 0 is only ever a witness written where Faust knows of no commit: never let
        # it move back a committed offset Faust did not know of
        zero = [tp for tp, value in written.items() if value.offset == 0]
        if zero:
            answer = await consumer._coordinator.fetch_committed_offsets(zero)
            for tp in zero:
                found = answer.get(tp)
                if found is not None and found.offset > 0:
                    written[tp] = OffsetAndMetadata(found.offset, written[tp].metadata)
        await commit(written)
        for tp, value in written.items():
            witnesses.on_broker[tp.topic, tp.partition] = value.metadata

    async def committed_with_witness(partition: Any) -> int | None:
        if consumer._group_id is None:
            raise IllegalOperation("Requires group_id")
        answer = await consumer._coordinator.fetch_committed_offsets([partition])
        found = answer.get(partition)
        witnesses.on_broker[partition.topic, partition.partition] = (
            "" if found is None else found.metadata or ""
        )
        if found is None or found.offset == -1:
            return None
        return int(found.offset)

    consumer.commit = commit_with_witness
    consumer.committed = committed_with_witness


def tuned_fetching(
    base: type,
    *,
    fetch_wait_seconds: float,
    lease: MembershipLease | None = None,
    witnesses: CloseWitnesses | None = None,
) -> type:
    """A subclass of Faust's aiokafka consumer ``base`` whose underlying aiokafka consumer
    long-polls at most ``fetch_wait_seconds``, renews ``lease`` (:func:`lease_renewals`) and
    writes and reads close ``witnesses`` (:func:`witness_metadata`)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    wait_ms = max(1, round(fetch_wait_seconds * 1000))

    class TunedConsumerThread(AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> Any:
            consumer = super()._create_worker_consumer(transport)
            # read by AIOKafkaConsumer.start() when it builds its Fetcher
            consumer._fetch_max_wait_ms = wait_ms
            if lease is not None:
                lease_renewals(consumer, lease)
            if witnesses is not None:
                witness_metadata(consumer, witnesses)
            return consumer

    class TunedFetching(base):  # type: ignore[misc]
        def _new_consumer_thread(self) -> Any:
            return TunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    TunedFetching.__name__ = f"TunedFetching{base.__name__}"
    return TunedFetching


def honest_commits(base: type) -> type:
    """A subclass of Faust's transport consumer ``base`` whose record of committed offsets
    takes a commit's offsets only when the broker accepted it and no rebalance began while it
    was out (see the module docstring)."""

    class HonestCommits(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._rebalances_begun = 0
            # the record of the committing partitions when the last commit returned
            self._record_at_return: dict[Any, int | None] | None = None

        async def on_partitions_revoked(self, revoked: set[Any]) -> None:
            self._rebalances_begun += 1
            await super().on_partitions_revoked(revoked)

        async def on_partitions_assigned(self, assigned: set[Any], generation_id: int = 0) -> None:
            self._rebalances_begun += 1
            await super().on_partitions_assigned(assigned, generation_id)

        async def _commit(self, offsets: Any) -> bool:
            accepted = bool(await super()._commit(offsets))
            # Faust's _commit_offsets writes ``offsets`` into the record right after this
            # returns, with no await in between: what it says now is what it said before that
            record = self._committed_offset
            self._record_at_return = {tp: record.get(tp) for tp in offsets}
            return accepted

        def _take_record_at_return(self) -> dict[Any, int | None] | None:
            taken, self._record_at_return = self._record_at_return, None
            return taken

        async def _commit_offsets(self, offsets: Any, start_new_transaction: bool = True) -> bool:
            rebalances = self._rebalances_begun
            self._record_at_return = None
            did_commit = bool(await super()._commit_offsets(offsets, start_new_transaction))
            before = self._take_record_at_return()
            if before is not None and (not did_commit or rebalances != self._rebalances_begun):
                record = self._committed_offset
                for tp, offset in before.items():
                    if offset is None:
                        record.pop(tp, None)
                    else:
                        record[tp] = offset
            return did_commit

    HonestCommits.__name__ = f"HonestCommits{base.__name__}"
    return HonestCommits


def acknowledged_commits(base: type, witnesses: CloseWitnesses | None = None) -> type:
    """A subclass of Faust's transport consumer ``base`` whose commits of input partitions take
    the offsets :meth:`acknowledge_through` was given (the release service made them durable)
    instead of Faust's per-record acknowledgements (see the module docstring), and whose
    periodic commit also writes a partition whose close witness changed (``witnesses``,
    :meth:`witness_closes`) at the offset already committed."""
    from faust.exceptions import NotReady

    class AcknowledgedCommits(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # per input partition: the offset after the last record whose effects are durable
            self._processed_until: dict[Any, int] = {}

        def acknowledge_through(self, tp: Any, next_offset: int, count: int) -> None:
            """The records of ``tp`` before ``next_offset`` are durably processed: Faust may
            commit ``next_offset`` (``count`` records, for its commit-every counter)."""
            try:
                owned = tp in self.assignment()
            except NotReady:  # the consumer is stopping: nothing more gets committed
                return
            if not owned:
                return  # revoked meanwhile: the next owner starts from the committed offset
            if next_offset > self._processed_until.get(tp, -1):
                self._processed_until[tp] = next_offset
            # Faust's commits look at the partitions that have an entry here
            self._acked.setdefault(tp, [])
            self._n_acked += count

        def witness_closes(self, tp: Any) -> None:
            """``witnesses`` holds a new witness of ``tp`` (its checkpoint is durable): the
            next commit writes it, at the offset already committed when no record of ``tp``
            was processed since."""
            try:
                owned = tp in self.assignment()
            except NotReady:
                return
            if owned:
                self._acked.setdefault(tp, [])  # Faust's commits look at these partitions

        def _witness_pending(self, tp: Any) -> bool:
            return witnesses is not None and witnesses.pending(tp.topic, tp.partition)

        def _new_offset(self, tp: Any) -> int | None:
            until = self._processed_until.get(tp)
            if until is not None:
                return until
            if self._witness_pending(tp):
                return int(self._committed_offset.get(tp) or 0)
            return super()._new_offset(tp)  # type: ignore[no-any-return]

        def _should_commit(self, tp: Any, offset: int) -> bool:
            if super()._should_commit(tp, offset):
                return True
            # the same offset again, to write the witness (never an offset below the record)
            return self._witness_pending(tp) and offset >= (self._committed_offset.get(tp) or 0)

        async def on_partitions_revoked(self, revoked: set[Any]) -> None:
            for tp in revoked:
                self._processed_until.pop(tp, None)
            if witnesses is not None:
                witnesses.forget({(tp.topic, tp.partition) for tp in revoked})
            await super().on_partitions_revoked(revoked)

        async def on_partitions_assigned(self, assigned: set[Any], generation_id: int = 0) -> None:
            # the revocation hook settles the batch in flight after Faust forgot the revoked
            # partitions, so its acknowledgements can bring back partitions this worker no
            # longer holds: Faust would then try to commit them at every commit, each time
            # discarded with a log line, for as long as the assignment lasts
            self._processed_until.clear()
            for tp in [tp for tp in self._acked if tp not in assigned]:
                del self._acked[tp]
            if witnesses is not None:  # (a witness set after the revocation forgot them)
                witnesses.keep_only({(tp.topic, tp.partition) for tp in assigned})
            await super().on_partitions_assigned(assigned, generation_id)

    AcknowledgedCommits.__name__ = f"AcknowledgedCommits{base.__name__}"
    return AcknowledgedCommits


def batching_consumer(
    base: type, queue: BatchQueue, witnesses: CloseWitnesses | None = None
) -> type:
    """A subclass of Faust's transport consumer ``base`` whose drain loop routes input-topic
    records to ``queue`` one fetch at a time; its commits are :func:`acknowledged_commits`'s
    (with ``witnesses``)."""

    topics = queue.topics

    class BatchingConsumer(acknowledged_commits(base, witnesses)):  # type: ignore[misc]
        async def _fetch_again(self) -> None:
            """Seek every assigned partition back to where its next owner would begin, so
            that records a fetch returned and the loop did not queue are fetched again (those
            the release service applied already are skipped by its applied offsets): Faust's
            seek to the committed offsets, and the log start for input partitions with none
            committed, which that seek leaves where they are (aiokafka seeks only offsets
            above 0; the worker's offset reset is "earliest"). Nothing while the flow is
            suspended: a rebalance is under way (Faust suspends the flow only at a revocation
            and when stopping), and its recovery seeks every partition once the new assignment
            is in place, while a seek now would ask for the committed offsets of the old one,
            one partition at a time, and fail half-way when the assignment changes under it."""
            if not self.flow_active:
                return
            try:
                await self.perform_seek()
                for tp in self.assignment():
                    if tp.topic in topics and not self._read_offset.get(tp):
                        await self.seek(tp, 0)
            except Exception as exc:  # Faust's own loop logs and goes on too
                self.log.warning("exception performing seek: %r", exc)

        async def _drain_messages(self, fetcher: Any) -> None:
            read_offset = self._read_offset
            callback = self.callback
            to_message = self._to_message
            acks_enabled_for = self.app.topics.acks_enabled_for
            try:
                while not (self._stopped.is_set() or fetcher._stopped.is_set()):
                    await asyncio.sleep(0)
                    if self.should_stop:
                        break
                    generation = queue.generation
                    records, active = await self._wait_next_records(1.0)
                    if not records or self.should_stop:
                        continue
                    if not self.flow_active:
                        # a rebalance began while fetching: its recovery's seek has these
                        # records fetched again
                        continue
                    consumer_generation = self.app.consumer_generation_id
                    for tp, fetched in records.items():
                        if (
                            self.suspend_flow.is_set()
                            or self.app.consumer_generation_id != consumer_generation
                        ):
                            # a rebalance: the records left are fetched again
                            await self._fetch_again()
                            break
                        if active is not None and not (
                            tp in active or tp in self._buffered_partitions
                        ):
                            continue
                        if tp.topic in topics:
                            # every record aiokafka returned, none left out by Faust's read
                            # offset: records the worker applied already are skipped by the
                            # release service's applied offsets, the one record of where it
                            # stands, while a read offset left ahead of the records queued (a
                            # queued run dropped at a revocation, then the position moved back
                            # without it) would lose records for good. Holes in input offsets
                            # are the release service's business (it refuses them unless
                            # --allow-input-gaps); commits come from acknowledge_through,
                            # which ignores Faust's ack/gap bookkeeping
                            if not fetched:
                                continue
                            if not await queue.put(fetched, generation=generation):
                                # partitions were revoked since the fetch began, and the
                                # rebalance's seek may have come before the fetch: then the
                                # client's position is past these records already
                                await self._fetch_again()
                                break
                            read_offset[tp] = fetched[-1].offset
                            continue
                        fresh = unread(fetched, read_offset[tp])
                        for record in fresh:
                            message = to_message(tp, record)
                            last = read_offset[tp]
                            if last and message.offset - last > 1 and acks_enabled_for(tp.topic):
                                await self._add_gap(tp, last + 1, message.offset)
                            await self.wait_first(callback(message), self.suspend_flow.wait())
                            read_offset[tp] = message.offset
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


def fetch_view(consumer: Any, tp: Any) -> FetchView | None:
    """The view of partition ``tp`` from Faust's aiokafka consumer ``consumer`` (None while it
    has no client: starting or stopping). Reads the client's state only; sends nothing."""
    try:
        client_consumer = consumer._thread._ensure_consumer()
        end = client_consumer.highwater(tp)
        assignment = client_consumer._subscription.subscription.assignment
        state = assignment.state_value(tp) if assignment is not None else None
        fetched = state.position if state is not None and state.has_valid_position else None
        client = client_consumer._client
        leader = client.cluster.leader_for_partition(tp)
        reachable = False
        if leader is not None and leader >= 0:
            connection = client._conns.get((leader, ConnectionGroup.DEFAULT))
            reachable = connection is not None and bool(connection.connected())
    except (AttributeError, AssertionError, KeyError, TypeError, ConsumerStoppedError):
        return None
    return FetchView(
        end=None if end is None else int(end),
        fetched=None if fetched is None else int(fetched),
        leader=leader,
        leader_reachable=reachable,
    )


def committed_offset(consumer: Any, tp: Any) -> int:
    """The offset Faust's consumer last committed for ``tp`` (0 when none)."""
    return int(getattr(consumer, "_committed_offset", {}).get(tp) or 0)


async def broker_committed_offsets(consumer: Any, tps: Collection[Any]) -> dict[Any, int]:
    """The group's committed offset of each of ``tps`` as the broker has it now (0 where none
    was committed), asked by Faust's aiokafka consumer ``consumer`` from its own thread. May
    wait as long as the group coordinator is unknown: callers bound the wait."""
    thread = consumer._thread
    client_consumer = thread._ensure_consumer()
    asked = list(tps)

    async def ask() -> dict[Any, int]:
        answers = {}
        for tp in asked:
            offset = await client_consumer.committed(TopicPartition(tp.topic, tp.partition))
            answers[tp] = 0 if offset is None else int(offset)
        return answers

    return await thread.call_thread(ask)  # type: ignore[no-any-return]


def replace_crash_handler(
    app: Any, handler: Callable[[Callable[[BaseException], None]], Callable[[BaseException], None]]
) -> None:
    """Replace the app's synchronous crash handler (``app._crash``) by ``handler(original)``."""
    app._crash = handler(app._crash)


async def cluster_metadata(consumer: Any) -> Any:
    """The metadata of every topic, from a started aiokafka consumer (its own cluster view
    covers only the topics it reads, which on Apache Kafka is none yet)."""
    return await consumer._client.fetch_all_metadata()


_SKIP_NOTING = "_streamdp_notes_skipped_offsets"


def note_skipped_offsets(skipped: SkippedOffsets) -> None:
    """From now on every aiokafka consumer of the process adds to ``skipped`` the offsets it
    passes over while reading a fetch's records (``PartitionRecords._unpack_records``): from
    the fetch offset to the first record it delivers, between two records it delivers, and
    after the last one up to where its next fetch starts (``next_fetch_offset``). It delivers
    every record it does not pass over, so a record a reader loses after delivery is never
    among them. Idempotent: a second call only changes the registry."""
    from aiokafka.consumer.fetcher import PartitionRecords

    unpack = getattr(PartitionRecords._unpack_records, _SKIP_NOTING, None)
    if unpack is None:
        unpack = PartitionRecords._unpack_records

    def unpack_noting_skips(self: Any) -> Any:
        tp = self._tp
        expected = self.next_fetch_offset
        for record in unpack(self):
            if record.offset > expected:
                skipped.add(tp.topic, tp.partition, expected, record.offset)
            expected = record.offset + 1
            yield record
        if self.next_fetch_offset > expected:
            skipped.add(tp.topic, tp.partition, expected, self.next_fetch_offset)

    setattr(unpack_noting_skips, _SKIP_NOTING, unpack)
    PartitionRecords._unpack_records = unpack_noting_skips
