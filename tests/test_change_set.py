"""The engine's change set and the checkpoint made of it (issue 15).

What these tests prove:
- one :meth:`Engine.take_changes` hands out everything a checkpoint stores, each thing once:
  the outputs the calls returned, in the order they were made and split by kind; the nodes, the
  event ids and the ledger spends since the previous take; the periods closed; and nothing
  more at a second take;
- an engine that does not record outputs (a file replay) holds none between takes;
- the service's checkpoint is that change set laid out in keys with the protocol's order:
  every node and noise chunk written once over a whole run, before the outbox records of its
  checkpoint, the hot state last; each outbox record deleted only in the cleanup; the outcome's
  releases, revisions and dead letters are exactly the records published, by topic; a service
  restarted from the written table alone releases what the uninterrupted run releases.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from service_steps import batch_then_tick, process_and_tick
from test_daemon_service import (
    START,
    TOPICS,
    StepClock,
    _apply,
    _records,
    _spec,
)

from streamdp.daemon.checkpoint_writer import SourceSlot, write_checkpoint
from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.routing import InputRecord, OutputTopics
from streamdp.daemon.service import ReleaseService
from streamdp.engine import ConsistentRecord, DeadLetterRecord, Engine, ReleaseRecord
from streamdp.engine.changes import ChangeSet, EpochNoise
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import generate, release_instant

DAY = 86400


def test_one_take_hands_out_the_outputs_by_kind_and_what_changed_once() -> None:
    spec = _spec("restaurant+fda")  # 8-day epochs
    engine = Engine(spec, sampler=InsecureSeededSampler(2), record_outputs=True)
    stream = next(iter(spec.streams))
    lines = [line.text for line in generate("restaurant", 12, 4, seed=1, bad_fraction=0.2)]
    returned: list[Any] = []
    engine.advance_clock(START + 3600)
    for line in lines:
        returned += engine.ingest(line).dead_letters
    counted = engine.take_changes()
    assert list(counted.outputs) == list(counted.dead_letters) == returned
    assert counted.new_ids
    assert counted.closed_periods == ()
    assert set(counted.new_ids) == set(counted.open_periods)
    returned += engine.advance_clock(START + 10 * DAY + 3600)  # closes days 0-9: two epochs
    for line in lines[:5]:  # ids already counted: duplicates of open periods or late
        returned += engine.ingest(line).dead_letters
    returned = returned[len(counted.outputs) :]
    changes = engine.take_changes()
    assert list(changes.outputs) == returned  # the order they were made (the outbox's)
    assert list(changes.releases) == [r for r in returned if isinstance(r, ReleaseRecord)]
    assert list(changes.revisions) == [r for r in returned if isinstance(r, ConsistentRecord)]
    assert list(changes.dead_letters) == [r for r in returned if isinstance(r, DeadLetterRecord)]
    assert changes.releases
    assert changes.revisions
    assert changes.dead_letters
    # an epoch's spend is recorded at its first release, once
    assert counted.ledger_spends == ()
    assert [(s.stream, s.epoch) for s in changes.ledger_spends] == [(stream, 0), (stream, 1)]
    assert changes.periods_closed == {stream: 10}
    # the periods whose ids were handed out and are closed now: their ids may be dropped
    assert set(changes.closed_periods) == {k for k in counted.open_periods if k[1] < 10}
    assert all(j >= 10 for _, j in changes.open_periods)
    assert {e for _, e, _ in changes.new_nodes} == {0, 1}
    assert list(changes.new_nodes) == sorted(changes.new_nodes)
    assert "past_nodes" not in json.dumps(changes.hot_state)
    again = engine.take_changes()
    assert (again.outputs, again.new_nodes, again.new_ids, again.ledger_spends) == ((), {}, {}, ())
    assert again.closed_periods == ()
    assert again.open_periods == changes.open_periods
    assert again.hot_state == changes.hot_state


def test_revision_statistics_travel_with_the_revisions_to_the_metrics() -> None:
    """The metrics of a batch come from its outcome alone: the periods closed and the latest
    revision's diagnostics travel in the change set, so observing reaches back into nothing."""
    from prometheus_client.parser import text_string_to_metric_families

    from streamdp.daemon.observation import OutcomeObserver
    from streamdp.metrics import StreamdpMetrics

    spec = _spec("restaurant+fda")
    stream = next(iter(spec.streams))
    engine = Engine(spec, sampler=InsecureSeededSampler(2), record_outputs=True)
    engine.advance_clock(START + 3600)
    for line in generate("restaurant", 12, 4, seed=1):
        engine.ingest(line.text)
    engine.take_changes()
    engine.advance_clock(START + 10 * DAY + 3600)
    changes = engine.take_changes()
    assert changes.revisions
    stats = engine.streams[stream].last_revision
    assert stats is not None
    assert changes.revision_stats == {stream: stats}
    assert engine.take_changes().revision_stats == {}  # handed out once, with its revisions

    outcome = BatchOutcome()
    write_checkpoint("restaurant-orders", SourceSlot(engine, 0), changes, TOPICS, outcome)
    assert outcome.revision_stats == {stream: stats}
    assert outcome.periods_closed == {stream: 10}
    metrics = StreamdpMetrics()
    OutcomeObserver(metrics, spec)(outcome)
    values = {
        (sample.name, sample.labels.get("stream")): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode("utf-8"))
        for sample in family.samples
    }
    assert values[("streamdp_consistency_residual", stream)] == stats.residual
    assert values[("streamdp_consistency_runs_total", stream)] == 1.0


def test_an_engine_that_does_not_record_outputs_holds_none() -> None:
    spec = _spec("restaurant+fda")
    engine = Engine(spec, sampler=InsecureSeededSampler(2))
    engine.advance_clock(START + 3600)
    for line in generate("restaurant", 3, 4, seed=1, bad_fraction=0.3):
        engine.ingest(line.text)
    assert engine.advance_clock(START + 3 * DAY + 3600)
    changes = engine.take_changes()
    assert changes.outputs == changes.releases == changes.dead_letters == ()
    assert changes.ledger_spends == ()
    assert changes.new_nodes  # the state changes are handed out all the same


def _service(spec: Any, state: dict[str, Any], clock: StepClock) -> ReleaseService:
    return ReleaseService(
        spec, sampler=InsecureSeededSampler(9), state=state, topics=TOPICS, clock=clock
    )


def _published(outcome: Any, into: dict[str, str]) -> None:
    for p in outcome.publications:
        into[f"{p.topic}/{p.key}"] = p.value


@pytest.mark.parametrize("scenario", ["restaurant", "restaurant+kary_gls"])
def test_every_checkpoint_keeps_the_protocols_order_and_writes_each_node_once(
    scenario: str,
) -> None:
    spec = _spec(scenario)
    records, arrivals = _records(scenario, periods=20, rate=5, bad=0.1)
    state: dict[str, Any] = {}
    clock = StepClock()
    svc = _service(spec, state, clock)
    written: list[str] = []
    published: dict[str, str] = {}
    outcomes = []
    for first in range(0, len(records), 13):
        clock.value = arrivals[first]
        outcomes += batch_then_tick(svc, records[first : first + 13])
    clock.value = release_instant(spec, 20)
    while True:
        outcomes.append(svc.tick())
        if not svc.due():
            break
    for outcome in outcomes:
        keys = [w.key for w in outcome.writes]
        assert keys, "a touched source always writes its hot state"
        assert keys[-1] == "restaurant-orders", "the hot state is not the last write"
        assert keys.count("restaurant-orders") == 1
        outbox = [i for i, k in enumerate(keys) if "|out|" in k]
        stored = [i for i, k in enumerate(keys) if "|node|" in k or "|noise|" in k]
        if outbox and stored:
            assert max(stored) < min(outbox), "noise written after an output that used it"
        # each outbox record is deleted by the cleanup, never by the writes
        assert {w.key for w in outcome.cleanup if "|out|" in w.key} == {keys[i] for i in outbox}
        assert all(w.value is not None for w in outcome.writes)
        # the outcome's records by kind are exactly what is published, topic by topic
        by_topic: dict[str, list[str]] = {}
        for p in outcome.publications:
            by_topic.setdefault(p.topic, []).append(p.value)
        assert [r.to_json() for r in outcome.releases] == by_topic.get(TOPICS.releases, [])
        assert [r.to_json() for r in outcome.revisions] == by_topic.get(TOPICS.consistent, [])
        assert [r.to_json() for r in outcome.dead_letters] == by_topic.get(TOPICS.dead_letter, [])
        written += [k for k in keys if "|node|" in k or "|noise|" in k]
        _apply(state, outcome.writes)
        _published(outcome, published)
        _apply(state, outcome.cleanup)
    assert len(written) == len(set(written)), "a node or noise chunk was written twice"
    assert written
    assert not [k for k in state if "|out|" in k]

    # a service restarted from the table alone continues as the uninterrupted one
    half = len(records) // 26 * 13
    state2: dict[str, Any] = {}
    clock2 = StepClock()
    again: dict[str, str] = {}
    svc2 = _service(spec, state2, clock2)
    for first in range(0, len(records), 13):
        if first == half:
            svc2 = _service(spec, state2, clock2)  # restart: everything stored, all acked
        clock2.value = arrivals[first]
        outcome = process_and_tick(svc2, records[first : first + 13])
        _apply(state2, outcome.writes)
        _published(outcome, again)
        _apply(state2, outcome.cleanup)
    clock2.value = release_instant(spec, 20)
    while True:
        outcome = svc2.tick()
        _apply(state2, outcome.writes)
        _published(outcome, again)
        _apply(state2, outcome.cleanup)
        if not svc2.due():
            break
    assert again == published
    assert state2 == state


def test_a_misplaced_record_is_an_output_of_its_sources_checkpoint() -> None:
    """A record on the source's topic but keyed otherwise is dead-lettered through the source's
    outbox (its offset is the source's): the dead letter is in the change set's outputs."""
    spec = _spec("restaurant")
    records, _ = _records("restaurant", periods=2, rate=3)
    good, other = records[0], records[1]
    wrong = InputRecord(other.topic, 0, other.offset, b"someone-else", other.value)
    svc = _service(spec, {}, StepClock())
    outcome = process_and_tick(svc, [good, wrong])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    assert [w.key for w in outcome.writes if "|out|" in w.key] == [
        "restaurant-orders|out|000000000000"
    ]


def test_epoch_noise_of_a_hot_state_that_held_it_is_stored_as_chunks_at_the_next_checkpoint() -> (
    None
):
    """A hot state that kept a k-ary epoch's noise inline (no noise chunks): the change set of
    the next checkpoint hands the noise out again, so it is written as chunks and a later
    restart from the new layout reads it back, drawing nothing."""
    from test_daemon_service import CountingSampler

    scenario = "restaurant+kary_gls"
    spec = _spec(scenario)
    records, arrivals = _records(scenario, periods=4, rate=5)
    state: dict[str, Any] = {}
    clock = StepClock(arrivals[-1])
    drawn: list[str] = []

    def fresh() -> ReleaseService:
        return ReleaseService(
            spec, sampler=CountingSampler(4, drawn), state=state, topics=TOPICS, clock=clock
        )

    outcome = process_and_tick(fresh(), records[:-1])
    _apply(state, outcome.writes)
    _apply(state, outcome.cleanup)
    noise_keys = sorted(k for k in state if "|noise|" in k)
    assert noise_keys, "the epoch's noise was not drawn: the test proves nothing"
    # rewrite the stored state in the older layout: the noise inside the hot state, no chunks
    hot = state["restaurant-orders"]
    counter = hot["streams"]["restaurant-items"]["counter"]
    counter["node_noise"] = [row for key in noise_keys for row in state.pop(key)]
    hot["daemon"]["noise_chunks"] = []
    before = len(drawn)
    outcome = process_and_tick(fresh(), [records[-1]])
    assert sorted(w.key for w in outcome.writes if "|noise|" in w.key) == noise_keys
    _apply(state, outcome.writes)
    _apply(state, outcome.cleanup)
    stored = state["restaurant-orders"]["streams"]["restaurant-items"]["counter"]
    assert stored["node_noise"] is None
    # a restart from the new layout loads the noise from its chunks (a StateError if missing)
    assert process_and_tick(fresh(), [records[-1]]).skipped == 1
    assert len(drawn) == before, "stored noise was drawn again"


def test_the_writer_lays_a_change_set_out_in_keys_in_the_protocols_order() -> None:
    """The checkpoint writer alone, on a change set made by hand: event-id chunks after the
    period's stored ones, the epoch noise, the nodes in key order, the outbox, the hot state
    last with the daemon's fields; the cleanup deletes the outbox record, the chunks of the
    closed period and those an incomplete checkpoint left for a closed period, and keeps
    those it left for a period not open yet (they are rewritten)."""
    slot = SourceSlot(Engine(_spec("restaurant"), sampler=InsecureSeededSampler(1)), home=2)
    slot.seen_chunks[("s", 2)] = 1
    slot.seen_chunks[("s", 3)] = 1
    slot.seen_present[("s", 1)] = 2  # period 1 is closed: deleted
    slot.seen_present[("s", 9)] = 1  # period 9 is not open yet: kept
    letter = DeadLetterRecord(reason="malformed", message="not JSON", raw="x", topic="t")
    changes = ChangeSet(
        hot_state={"kind": "streamdp.engine"},
        new_nodes={("s", 0, 1): [1, 2], ("s", 0, 2): [3, 4]},
        new_noise=(EpochNoise("s", 1, np.array([[5, 6]], dtype=np.int64)),),
        open_periods=(("s", 3), ("s", 4)),
        new_ids={("s", 3): ["a", "b"]},
        closed_periods=(("s", 2),),
        periods_closed={"s": 3},
        outputs=(letter,),
        dead_letters=(letter,),
    )
    outcome = BatchOutcome()
    write_checkpoint("src", slot, changes, OutputTopics(), outcome)
    outbox = {"topic": "streamdp.dead-letter", "key": letter.key, "value": letter.to_json()}
    assert [(w.key, w.value) for w in outcome.writes] == [
        ("src|seen|s|3|1", ["a", "b"]),
        ("src|noise|s|1|0", [[5, 6]]),
        ("src|node|s|0|1", [1, 2]),
        ("src|node|s|0|2", [3, 4]),
        ("src|out|000000000000", outbox),
        (
            "src",
            {
                "kind": "streamdp.engine",
                "daemon": {
                    "home": 2,
                    "next_outbox": 1,
                    "seen_chunks": [["s", 3, 2], ["s", 4, 0]],
                    "noise_chunks": [["s", 1, 1]],
                },
            },
        ),
    ]
    assert {w.partition for w in (*outcome.writes, *outcome.cleanup)} == {2}
    assert sorted(w.key for w in outcome.cleanup) == [
        "src|out|000000000000",
        "src|seen|s|1|0",
        "src|seen|s|1|1",
        "src|seen|s|2|0",
    ]
    assert all(w.value is None for w in outcome.cleanup)
    assert [p.key for p in outcome.publications] == [letter.key]
    assert outcome.dead_letters == [letter]
    assert slot.seen_present == {("s", 9): 1}
