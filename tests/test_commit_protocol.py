"""The checkpoint protocol's order, on a fake state table and a fake producer (no broker).

What these tests prove (``streamdp.daemon.commit.CheckpointCommit``):
- every checkpoint write is acknowledged before the first publication is sent;
- the outbox is cleared only after every publication is acknowledged, and the table's local
  data ends equal to what its changelog says;
- a refused checkpoint write publishes nothing and observes nothing;
- a refused publication leaves the outbox in place (locally and in the changelog) for the
  source's next owner to publish again;
- the observer comes last, with the latency from the batch's receipt when there is one;
- each step first holds the membership lease, and a lease lost before a step stops the
  protocol there: lost before the checkpoint, nothing is written; lost before publishing, the
  checkpoint (outbox included) is durable and nothing is published.

The fakes journal every event in one list. An acknowledgement is journaled only when the
protocol awaits it (as Faust's futures, it completes on the broker's answer; here the answer is
given to whoever waits for it), so "acknowledged before" is read off the journal's order, with
no timing involved: a protocol that does not wait for an acknowledgement never journals it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from streamdp.daemon.commit import CheckpointCommit, kafka_seconds
from streamdp.daemon.outcome import BatchOutcome, Publication, StateWrite
from streamdp.errors import MembershipLostError

RELEASES = "streamdp.releases"
CONSISTENT = "streamdp.consistent"
NODE = "restaurant|node|combos|0|1"
STALE_SEEN = "restaurant|seen|combos|3|0"
OUTBOX = ("restaurant|out|7", "restaurant|out|8")
HOT = "restaurant"
Event = tuple[str, str]


class BrokerRefusedError(Exception):
    """The fake broker's refusal of one record."""


class Ack:
    """The broker's answer to one send: ``done`` (or ``refused``) is journaled when awaited."""

    def __init__(self, journal: list[Event], key: str, *, refused: bool) -> None:
        self._journal = journal
        self._key = key
        self._refused = refused

    def __await__(self) -> Generator[Any, None, None]:
        yield from asyncio.sleep(0).__await__()  # the answer arrives in a later turn of the loop
        if self._refused:
            self._journal.append(("refused", self._key))
            raise BrokerRefusedError(f"the fake broker refused {self._key!r}")
        self._journal.append(("acknowledged", self._key))


class FakeTable:
    """A state table: local ``data`` and a changelog whose sends are journaled."""

    def __init__(self, journal: list[Event], refuse: frozenset[str] = frozenset()) -> None:
        self._journal = journal
        self._refuse = refuse
        self.data: dict[Any, Any] = {STALE_SEEN: ["digest"]}
        self.changelog: dict[str, Any] = {STALE_SEEN: ["digest"]}

    def send_changelog(
        self, partition: int | None, key: Any, value: Any, **_serializers: Any
    ) -> Ack:
        assert partition == 3, f"changelog write to partition {partition}, not the source's home 3"
        self._journal.append(("changelog", key))
        refused = key in self._refuse
        if not refused:
            if value is None:
                self.changelog.pop(key, None)
            else:
                self.changelog[key] = value
        return Ack(self._journal, key, refused=refused)


class FakeTopic:
    """An output topic whose sends are journaled by key."""

    def __init__(self, journal: list[Event], refuse: frozenset[str] = frozenset()) -> None:
        self._journal = journal
        self._refuse = refuse
        self.timestamps: dict[str, float | None] = {}

    async def send(
        self, *, key: Any = None, value: Any = None, timestamp: float | None = None
    ) -> Ack:
        assert isinstance(key, bytes)
        assert isinstance(value, bytes)
        text = key.decode()
        self._journal.append(("publish", text))
        self.timestamps[text] = timestamp
        return Ack(self._journal, text, refused=text in self._refuse)


class Observer:
    """Journals that the batch was observed, and keeps the outcomes it was given."""

    def __init__(self, journal: list[Event]) -> None:
        self._journal = journal
        self.observed: list[BatchOutcome] = []

    def __call__(self, outcome: BatchOutcome) -> None:
        self._journal.append(("observed", ""))
        self.observed.append(outcome)


def outcome() -> BatchOutcome:
    """A batch that drew a node, dropped a closed period's event ids and released two records."""
    return BatchOutcome(
        writes=[
            StateWrite(3, NODE, {"value": 12}),
            StateWrite(3, STALE_SEEN, None),
            StateWrite(3, OUTBOX[0], {"topic": RELEASES, "key": "r0"}),
            StateWrite(3, OUTBOX[1], {"topic": CONSISTENT, "key": "c0"}),
            StateWrite(3, HOT, {"counts": {}}),
        ],
        publications=[
            Publication(RELEASES, "r0", '{"noisy_count": 12}'),
            Publication(CONSISTENT, "c0", '{"revision": 1}'),
        ],
        cleanup=[StateWrite(3, OUTBOX[0], None), StateWrite(3, OUTBOX[1], None)],
    )


class FakeLease:
    """A membership lease that journals each hold and is lost from the step named on."""

    STEPS = ("a checkpoint", "a publication", "clearing the outbox")

    def __init__(self, journal: list[Event], lost_from: str | None) -> None:
        self._journal = journal
        self._lost_from = None if lost_from is None else self.STEPS.index(lost_from)

    async def hold(self, step: str, generation: int | None = None) -> int:
        self._journal.append(("lease", step))
        assert generation in (None, 3), f"{step} held in generation {generation}"
        if self._lost_from is not None and self.STEPS.index(step) >= self._lost_from:
            raise MembershipLostError(f"lost before {step}")
        return 3

    async def outlast(self, pending: Any, step: str, generation: int | None) -> Any:
        assert (step, generation) == ("a checkpoint", 3)
        return await pending


class Run:
    """One commit of :func:`outcome` on fakes that refuse the given keys (with a lease when
    ``lease`` is True, lost from the step ``lost_from`` names)."""

    def __init__(
        self,
        *,
        refuse_changelog: str = "",
        refuse_publication: str = "",
        lease: bool = False,
        lost_from: str | None = None,
    ) -> None:
        self.journal: list[Event] = []
        self.table = FakeTable(self.journal, frozenset({refuse_changelog}))
        self.topics = {
            RELEASES: FakeTopic(self.journal, frozenset({refuse_publication})),
            CONSISTENT: FakeTopic(self.journal, frozenset({refuse_publication})),
        }
        self.observer = Observer(self.journal)
        held = FakeLease(self.journal, lost_from) if lease else None
        self.protocol = CheckpointCommit(self.table, self.topics, self.observer, held)

    def commit(self, made: BatchOutcome | None = None) -> None:
        asyncio.run(self.protocol.commit(outcome() if made is None else made))

    def first(self, event: Event) -> int:
        assert event in self.journal, f"{event} never happened: {self.journal}"
        return self.journal.index(event)

    def kinds(self, kind: str) -> list[str]:
        return [key for what, key in self.journal if what == kind]


CHECKPOINT_KEYS = [NODE, STALE_SEEN, *OUTBOX, HOT]


def test_every_checkpoint_write_is_acknowledged_before_the_first_publication() -> None:
    run = Run()
    run.commit()
    first_publication = run.first(("publish", "r0"))
    acknowledged_before = {
        key for what, key in run.journal[:first_publication] if what == "acknowledged"
    }
    assert acknowledged_before == set(CHECKPOINT_KEYS)
    assert run.kinds("publish") == ["r0", "c0"]


def test_the_outbox_is_cleared_only_after_every_publication_is_acknowledged() -> None:
    run = Run()
    run.commit()
    last_publication_ack = max(run.first(("acknowledged", key)) for key in ("r0", "c0"))
    outbox_deletions = [
        index
        for index, (what, key) in enumerate(run.journal)
        if what == "changelog" and key in OUTBOX
    ]
    # each outbox key is sent twice: written in step 1, deleted in step 3
    assert len(outbox_deletions) == 2 * len(OUTBOX)
    assert all(index > last_publication_ack for index in outbox_deletions[len(OUTBOX) :])
    assert all(index < last_publication_ack for index in outbox_deletions[: len(OUTBOX)])
    # local data and changelog agree, and hold the checkpoint without the outbox
    assert run.table.data == run.table.changelog
    assert set(run.table.data) == {NODE, HOT}
    assert run.journal[-1] == ("observed", "")


def test_a_refused_checkpoint_write_publishes_nothing() -> None:
    run = Run(refuse_changelog=HOT)
    with pytest.raises(BrokerRefusedError, match="restaurant"):
        run.commit()
    assert ("refused", HOT) in run.journal
    assert run.kinds("publish") == []
    assert run.observer.observed == []


def test_a_refused_publication_leaves_the_outbox_in_place() -> None:
    run = Run(refuse_publication="c0")
    with pytest.raises(BrokerRefusedError, match="c0"):
        run.commit()
    assert ("refused", "c0") in run.journal
    # the outbox was written once (step 1) and never deleted
    assert [key for key in run.kinds("changelog") if key in OUTBOX] == list(OUTBOX)
    for key in OUTBOX:
        assert key in run.table.data
        assert key in run.table.changelog
    assert run.observer.observed == []


def test_each_step_holds_the_lease_before_its_first_send() -> None:
    run = Run(lease=True)
    run.commit()
    holds = [index for index, (what, _) in enumerate(run.journal) if what == "lease"]
    assert [run.journal[i][1] for i in holds] == list(FakeLease.STEPS)
    checkpoint, publication, clearing = holds
    assert checkpoint == 0
    assert publication == run.first(("publish", "r0")) - 1
    assert max(run.first(("acknowledged", key)) for key in CHECKPOINT_KEYS) < publication
    # the clearing step's hold comes after the last publication's acknowledgement and
    # before the first outbox deletion
    assert max(run.first(("acknowledged", key)) for key in ("r0", "c0")) < clearing
    assert run.journal[clearing + 1] == ("changelog", OUTBOX[0])
    assert run.journal[-1] == ("observed", "")


def test_a_lease_lost_before_the_checkpoint_writes_and_publishes_nothing() -> None:
    run = Run(lease=True, lost_from="a checkpoint")
    with pytest.raises(MembershipLostError, match="a checkpoint"):
        run.commit()
    assert run.journal == [("lease", "a checkpoint")]
    assert run.table.changelog == {STALE_SEEN: ["digest"]}
    assert run.observer.observed == []


def test_a_lease_lost_before_publishing_leaves_a_durable_outbox_and_publishes_nothing() -> None:
    run = Run(lease=True, lost_from="a publication")
    with pytest.raises(MembershipLostError, match="a publication"):
        run.commit()
    assert run.kinds("publish") == []
    assert {key for what, key in run.journal if what == "acknowledged"} == set(CHECKPOINT_KEYS)
    for key in OUTBOX:  # the next owner restores these and publishes the same values
        assert key in run.table.changelog
    assert run.observer.observed == []


def test_a_lease_lost_before_clearing_leaves_the_outbox_and_observes_nothing() -> None:
    run = Run(lease=True, lost_from="clearing the outbox")
    with pytest.raises(MembershipLostError, match="clearing"):
        run.commit()
    assert run.kinds("publish") == ["r0", "c0"]
    for key in OUTBOX:  # a lost deletion only re-publishes identical records later
        assert key in run.table.changelog
    assert run.observer.observed == []


def test_a_group_that_moved_to_a_new_generation_during_the_checkpoint_gets_no_publication() -> None:
    """The lease of generation 4 (the worker rejoined while its checkpoint travelled) holds
    nothing for the publications of a commit that began in generation 3: the worker's
    partitions may be another's in generation 4."""
    from streamdp.daemon.membership_lease import MembershipLease

    lease = MembershipLease(session_timeout=10.0, rebalance_timeout=20.0, margin=2.5)
    lease.renew(3, time.monotonic())
    run = Run()

    class RejoiningTable(FakeTable):
        def send_changelog(self, partition: int | None, key: Any, value: Any, **kw: Any) -> Ack:
            if key == HOT:  # the consumer's thread: SyncGroup of generation 4 answered
                lease.renew(4, time.monotonic())
            return super().send_changelog(partition, key, value, **kw)

    table = RejoiningTable(run.journal)
    protocol = CheckpointCommit(table, run.topics, run.observer, lease)
    with pytest.raises(MembershipLostError, match="new generation before a publication"):
        asyncio.run(protocol.commit(outcome()))
    assert run.kinds("publish") == []
    for key in OUTBOX:  # durable: a next owner restores and publishes the same values
        assert key in table.changelog


class Unanswered:
    """An acknowledgement the fake broker gives only once ``answer`` is set."""

    def __init__(self, answer: asyncio.Event) -> None:
        self._answer = answer

    def __await__(self) -> Generator[Any, None, None]:
        yield from self._answer.wait().__await__()


class MovingClock:
    """Monotonic seconds the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpoint_unacknowledged_when_the_lease_ends_ends_the_worker_at_once() -> None:
    """A wide stream's checkpoint (hundreds of MB of node parts) takes seconds to reach the
    broker after step 1's hold. The lease must outlast its acknowledgements: renewals meanwhile
    extend it, and when it ends first the worker ends at once (``abandon``: os._exit in the
    worker), so the writes still queued in the process never land after an expulsion."""
    from streamdp.daemon.membership_lease import MembershipLease

    clock = MovingClock()
    lease = MembershipLease(
        session_timeout=10.0, rebalance_timeout=20.0, margin=2.5, clock=clock, poll_seconds=0.0
    )
    lease.renew(3, sent=100.0)  # holds until 107.5
    run = Run()
    abandoned: list[MembershipLostError] = []

    async def scenario() -> None:
        answer = asyncio.Event()

        class SlowBroker(FakeTable):
            def send_changelog(self, partition: int | None, key: Any, value: Any, **kw: Any) -> Any:
                super().send_changelog(partition, key, value, **kw)
                return Unanswered(answer)

        table = SlowBroker(run.journal)
        protocol = CheckpointCommit(table, run.topics, run.observer, lease, abandoned.append)
        commit = asyncio.create_task(protocol.commit(outcome()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not commit.done()  # the checkpoint travels; the lease holds
        clock.now = 105.0
        lease.renew(3, sent=105.0)  # a heartbeat answered meanwhile: holds until 112.5
        clock.now = 110.0
        for _ in range(20):
            await asyncio.sleep(0)
        assert not commit.done()
        assert abandoned == []
        clock.now = 112.5  # the lease ends with the checkpoint not all acknowledged
        with pytest.raises(MembershipLostError, match="ran out"):
            await asyncio.wait_for(commit, timeout=2)

    asyncio.run(scenario())
    assert len(abandoned) == 1
    assert run.kinds("publish") == []
    assert run.observer.observed == []


def test_a_checkpoint_acknowledged_within_the_lease_goes_on_to_publish() -> None:
    from streamdp.daemon.membership_lease import MembershipLease

    clock = MovingClock()
    lease = MembershipLease(
        session_timeout=10.0, rebalance_timeout=20.0, margin=2.5, clock=clock, poll_seconds=0.0
    )
    lease.renew(3, sent=100.0)
    run = Run()
    abandoned: list[MembershipLostError] = []
    protocol = CheckpointCommit(run.table, run.topics, run.observer, lease, abandoned.append)
    asyncio.run(protocol.commit(outcome()))
    assert abandoned == []
    assert run.kinds("publish") == ["r0", "c0"]


def test_a_ticks_releases_carry_its_instant_to_the_millisecond_and_dead_letters_none() -> None:
    """Issue 25: a release's Kafka timestamp is the tick's public instant, never the send
    time; Faust sends int(seconds * 1000), so the seconds handed to it must survive that."""
    instants = [1_700_000_000.123, 1_706_745_600.0, 0.001, 1_234_567_890.999, 1e9 + 0.5]
    rng = np.random.default_rng(25)
    instants += list(np.round(rng.uniform(1e9, 2e9, 2000), 3))
    for instant in instants:
        seconds = kafka_seconds(float(instant))
        assert seconds is not None
        assert int(seconds * 1000.0) == round(float(instant) * 1000.0), instant
    assert kafka_seconds(None) is None
    run = Run()
    made = outcome()
    stamped = [replace(p, timestamp=1_706_745_600.25) for p in made.publications]
    run.commit(replace(made, publications=[*stamped, Publication(RELEASES, "d0", "{}")]))
    sent = run.topics[RELEASES].timestamps | run.topics[CONSISTENT].timestamps
    assert sent == {"r0": 1_706_745_600.25, "c0": 1_706_745_600.25, "d0": None}
    assert run.observer.observed
    assert run.observer.observed[0].publications[0].key == "r0"
