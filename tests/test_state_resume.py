"""A source's stored state must not be behind what the input group committed.

The group commits a record only after a checkpoint applied it, so a state that has not applied
every committed record was lost, truncated or restored from an older copy: loading it would
close periods already published again, with new noise (an attacker averages the two draws),
and skip the records in between. What these tests prove, on the release service over a dict
table, with the group's committed offset handed in as the worker hands it in:
- a table that lost the source's state, or one restored from a copy taken mid-run, is refused
  with a StateError when the source loads, on the assignment path and on the input path, before
  anything is published;
- a copy taken after the last commit (a stopped worker's) loads and continues exactly as the
  uninterrupted run; a fresh group (nothing committed) starts a new source;
- a wrongly keyed record that arrives first on the source's home partition creates its state
  (and is dead-lettered through its outbox), so its commit never looks like lost state;
- a state key streamdp never writes is refused as damage (StateError), not a crash.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from service_steps import apply_writes
from test_daemon_service import StepClock, _records, _spec

from streamdp.daemon.checkpoint import hot_key
from streamdp.daemon.routing import InputRecord, home_partition
from streamdp.daemon.service import ReleaseService
from streamdp.errors import StateError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import release_instant

SCENARIO = "restaurant+fda"
PARTITIONS = 2  # keyed: a record keyed otherwise is dead-lettered, not counted
SOURCE = next(iter(_spec(SCENARIO).sources))
HOME = home_partition(SOURCE, PARTITIONS)


class Group:
    """The input group's committed offsets: the next offset to read per (topic, partition),
    moved past a batch's records once its outcome is durable (as the worker commits)."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, partition: int) -> int:
        return self.offsets.get((topic, partition), 0)

    def commit(self, records: list[InputRecord]) -> None:
        for r in records:
            key = (r.topic, r.partition)
            self.offsets[key] = max(self.offsets.get(key, 0), r.offset + 1)


def _service(table: dict[str, Any], clock: StepClock, group: Group) -> ReleaseService:
    spec = _spec(SCENARIO)
    topic = next(iter(spec.sources.values())).topic
    return ReleaseService(
        spec,
        sampler=InsecureSeededSampler(9),
        state=table,
        clock=clock,
        topic_partitions={topic: PARTITIONS},
        committed_offset=group,
    )


def _drive(
    table: dict[str, Any],
    group: Group,
    batches: list[list[InputRecord]],
    arrivals: list[float],
    *,
    snapshot_after: int | None = None,
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """Assign the source, then each batch: process, tick, make durable, commit. Returns what
    was published (key -> value) and a copy of the table after batch ``snapshot_after``."""
    clock = StepClock()
    service = _service(table, clock, group)
    published: dict[str, str] = {}
    kept = None

    def durable(outcome: Any) -> None:
        apply_writes(table, outcome.writes)
        for p in outcome.publications:
            published[f"{p.topic}/{p.key}"] = str(p.value)
        apply_writes(table, outcome.cleanup)

    durable(service.assign([HOME]))
    for i, batch in enumerate(batches):
        clock.value = arrivals[i]
        durable(service.process(batch))
        durable(service.tick())
        group.commit(batch)
        if i == snapshot_after:
            kept = copy.deepcopy(table)
    return published, kept


def _batches() -> tuple[list[list[InputRecord]], list[float]]:
    records, arrivals = _records(SCENARIO, periods=12, rate=4)
    records = [InputRecord(r.topic, HOME, r.offset, r.key, r.value) for r in records]
    batches = [records[i : i + 10] for i in range(0, len(records), 10)]
    return batches, [arrivals[i] for i in range(0, len(records), 10)]


def test_a_lost_state_is_refused_when_the_group_has_committed_records() -> None:
    batches, arrivals = _batches()
    table: dict[str, Any] = {}
    group = Group()
    published, _ = _drive(table, group, batches, arrivals)
    assert published
    source = next(iter(_spec(SCENARIO).sources))
    assert hot_key(source) in table
    for lost in ({}, {k: v for k, v in table.items() if k != hot_key(source)}):
        clock = StepClock(arrivals[-1])
        with pytest.raises(StateError, match=r"behind|holds none"):
            _service(dict(lost), clock, group).assign([HOME])
        with pytest.raises(StateError, match="older copy"):  # the input path loads it too
            _service(dict(lost), clock, group).process(batches[-1])


def test_a_state_restored_from_an_older_copy_is_refused() -> None:
    batches, arrivals = _batches()
    table: dict[str, Any] = {}
    group = Group()
    _, older = _drive(table, group, batches, arrivals, snapshot_after=len(batches) // 2)
    assert older is not None
    with pytest.raises(StateError, match="behind"):
        _service(older, StepClock(arrivals[-1]), group).assign([HOME])


def test_a_copy_taken_after_the_last_commit_continues_as_the_uninterrupted_run() -> None:
    batches, arrivals = _batches()
    half = len(batches) // 2
    whole, _ = _drive({}, Group(), batches, arrivals)

    table: dict[str, Any] = {}
    group = Group()
    first, _ = _drive(table, group, batches[:half], arrivals[:half])
    stopped = copy.deepcopy(table)  # every worker stopped after its last commit
    clock = StepClock(arrivals[half])
    service = _service(stopped, clock, group)
    rest: dict[str, str] = {}
    apply_writes(stopped, service.assign([HOME]).writes)
    for i in range(half, len(batches)):
        clock.value = arrivals[i]
        for outcome in (service.process(batches[i]), service.tick()):
            apply_writes(stopped, outcome.writes)
            rest.update({f"{p.topic}/{p.key}": str(p.value) for p in outcome.publications})
            apply_writes(stopped, outcome.cleanup)
        group.commit(batches[i])
    assert {**first, **rest} == whole


def test_a_fresh_group_starts_a_new_source() -> None:
    batches, arrivals = _batches()
    published, _ = _drive({}, Group(), batches[:2], arrivals[:2])
    assert published


def test_a_wrongly_keyed_first_record_creates_the_state_it_is_committed_in() -> None:
    batches, arrivals = _batches()
    first = batches[0][0]
    stray = InputRecord(first.topic, first.partition, 0, b"someone-else", first.value)
    following = batches[0][1:4]  # offsets 1-3, after the stray record's 0
    table: dict[str, Any] = {}
    group = Group()
    clock = StepClock(arrivals[0])
    service = _service(table, clock, group)  # no assignment yet: the input path loads it
    outcome = service.process([stray])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    apply_writes(table, outcome.writes)
    apply_writes(table, outcome.cleanup)
    group.commit([stray])
    again = _service(table, StepClock(arrivals[0]), group)  # a restart: accepted
    apply_writes(table, again.process(following).writes)


def test_a_state_key_streamdp_never_writes_is_refused_as_damage() -> None:
    batches, arrivals = _batches()
    table: dict[str, Any] = {}
    group = Group()
    _drive(table, group, batches[:2], arrivals[:2])
    source = next(iter(_spec(SCENARIO).sources))
    table[f"{source}|node|restaurant-items|notanumber|1"] = [1, 2]
    with pytest.raises(StateError, match="never writes"):
        _service(table, StepClock(release_instant(_spec(SCENARIO), 3)), group).assign([HOME])


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("restaurant", "epsilon"),
        ("restaurant", "sensitivity"),
        ("restaurant", "noise_label"),
        ("restaurant+kary_gls", "epsilon"),
        ("restaurant+blt", "gaussian.rho"),
        ("hospital+zcdp", "gaussian.l2_squared"),
        ("county-admissions+levels", "groups[1].counter.epsilon"),
    ],
)
def test_a_stored_counter_with_other_privacy_parameters_is_refused(kind: str, field: str) -> None:
    """A state whose counter says epsilon 1000 (or another sensitivity, rho, noise label)
    would release nearly exact counts under records that state the spec's epsilon. (The k-ary
    level budgets and the BLT lattice, an optimiser's output, are not compared: their privacy
    is checked where they are read.)"""
    from test_node_retirement import _lines, _run, _short

    from streamdp.engine import Engine

    spec = _short(kind, "epoch-end")
    engine = Engine(spec, sampler=InsecureSeededSampler(3), stores_nodes=False)
    _run(engine, _lines(kind, spec), spec)
    state = json.loads(json.dumps(engine.snapshot()))
    Engine(spec, sampler=InsecureSeededSampler(3)).restore(copy.deepcopy(state))  # as stored
    name = next(n for n, s in state["streams"].items() if _holds(s["counter"], field))
    target = state["streams"][name]["counter"]
    *parents, last = re.split(r"\.|\[(\d+)\]\.?", field)[::1]
    for part in [p for p in parents if p]:
        target = target[int(part)] if part.isdigit() else target[part]
    value = target[last]
    target[last] = (
        value + "-other" if isinstance(value, str)
        else [v * 2 for v in value] if isinstance(value, list)
        else value * 1000
    )  # fmt: skip
    with pytest.raises(StateError, match="differs from the spec"):
        Engine(spec, sampler=InsecureSeededSampler(3)).restore(state)


def _holds(counter: dict[str, Any], field: str) -> bool:
    node: Any = counter
    for part in [p for p in re.split(r"\.|\[(\d+)\]\.?", field) if p]:
        try:
            node = node[int(part)] if part.isdigit() else node[part]
        except (KeyError, IndexError, TypeError):
            return False
    return True


def test_outputs_of_a_checkpoint_cut_before_its_hot_state_are_made_again_not_republished() -> None:
    """A crash after a checkpoint's node and outbox writes, before its hot state: the outbox
    records were never published and the spends they depend on are not durable (the ledger is
    in the hot state). The reload publishes none of them; the periods close again from the
    stored nodes, with the spends in the checkpoint before their publication, and publish
    exactly what the uninterrupted run does."""
    batches, arrivals = _batches()
    whole, _ = _drive({}, Group(), batches, arrivals)

    table: dict[str, Any] = {}
    group = Group()
    clock = StepClock()
    service = _service(table, clock, group)
    published: dict[str, str] = {}

    def durable(outcome: Any) -> None:
        apply_writes(table, outcome.writes)
        published.update({f"{p.topic}/{p.key}": str(p.value) for p in outcome.publications})
        apply_writes(table, outcome.cleanup)

    durable(service.assign([HOME]))
    cut = False
    for i, batch in enumerate(batches):
        clock.value = arrivals[i]
        durable(service.process(batch))
        ticked = service.tick()
        if not cut and ticked.releases:
            cut = True
            assert ticked.writes[-1].key == hot_key(SOURCE)
            apply_writes(table, ticked.writes[:-1])  # the crash: no hot state, no publication
            service = _service(table, clock, group)
            reloaded = service.assign([HOME])
            assert reloaded.publications == []
            durable(reloaded)
            ticked = service.tick()  # the same periods close again
            assert ticked.releases
            ledger = table[hot_key(SOURCE)]["ledger"]
            assert ticked.writes[-1].value["ledger"] != ledger  # the spends come with them
            durable(ticked)
        else:
            durable(ticked)
        group.commit(batch)
    assert cut
    assert published == whole


def test_a_kary_state_whose_optimised_budgets_moved_by_an_ulp_still_restores() -> None:
    """The level budgets are an optimiser's output: a library upgrade may move them by an ulp.
    A stored state keeps its own (valid: they sum to at most 1 exactly) and restores."""
    from test_node_retirement import _lines, _run, _short

    from streamdp.engine import Engine

    spec = _short("restaurant+kary_gls", "epoch-end")
    engine = Engine(spec, sampler=InsecureSeededSampler(3), stores_nodes=False)
    _run(engine, _lines("restaurant+kary_gls", spec), spec)
    state = json.loads(json.dumps(engine.snapshot()))
    counter = next(iter(state["streams"].values()))["counter"]
    counter["budgets"] = [b * (1 - 2**-50) for b in counter["budgets"]]
    Engine(spec, sampler=InsecureSeededSampler(3)).restore(state)
