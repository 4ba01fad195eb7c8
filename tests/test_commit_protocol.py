"""The checkpoint protocol's order, on a fake state table and a fake producer (no broker).

What these tests prove (``streamdp.daemon.commit.CheckpointCommit``):
- every checkpoint write is acknowledged before the first publication is sent;
- the outbox is cleared only after every publication is acknowledged, and the table's local
  data ends equal to what its changelog says;
- a refused checkpoint write publishes nothing and observes nothing;
- a refused publication leaves the outbox in place (locally and in the changelog) for the
  source's next owner to publish again;
- the observer comes last, with the latency from the batch's receipt when there is one.

The fakes journal every event in one list. An acknowledgement is journaled only when the
protocol awaits it (as Faust's futures, it completes on the broker's answer; here the answer is
given to whoever waits for it), so "acknowledged before" is read off the journal's order, with
no timing involved: a protocol that does not wait for an acknowledgement never journals it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from streamdp.daemon.commit import CheckpointCommit, kafka_seconds
from streamdp.daemon.outcome import BatchOutcome, Publication, StateWrite

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


class Run:
    """One commit of :func:`outcome` on fakes that refuse the given keys."""

    def __init__(self, *, refuse_changelog: str = "", refuse_publication: str = "") -> None:
        self.journal: list[Event] = []
        self.table = FakeTable(self.journal, frozenset({refuse_changelog}))
        self.topics = {
            RELEASES: FakeTopic(self.journal, frozenset({refuse_publication})),
            CONSISTENT: FakeTopic(self.journal, frozenset({refuse_publication})),
        }
        self.observer = Observer(self.journal)
        self.protocol = CheckpointCommit(self.table, self.topics, self.observer)

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
