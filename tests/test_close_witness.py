"""The input group's commits witness the periods closed, so a restored state copy that only
missed closes made by the clock is refused (streamdp.daemon.close_witness).

The offset check (tests/test_state_resume.py) cannot see such a copy: while no record arrives,
a copy taken days ago has applied every committed offset. In process, on the release service
over a dict table, with the witness the worker writes after each durable tick:
- a quiet source (no record at all) closes eight days on the clock; a copy of the table taken
  after the third loads without the witness (the gap) and is refused with it, before anything
  is published; a lost state is refused too;
- the current copy loads with the witness and goes on exactly as the uninterrupted run;
- the witness text: round trip, bounded size, other programs' metadata and damage read as none.
The worker's wiring (commit metadata written and read on a broker) is in
tests/test_daemon_lost_state_broker.py.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from service_steps import apply_writes
from test_daemon_service import StepClock, _spec

from streamdp.daemon.close_witness import (
    MAX_WITNESS_BYTES,
    PREFIX,
    CloseWitnesses,
    check_closes,
    witness_text,
    witnessed_closes,
)
from streamdp.daemon.routing import home_partition
from streamdp.daemon.service import ReleaseService
from streamdp.errors import StateError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import release_instant

SCENARIO = "restaurant+fda"
PARTITIONS = 2
SPEC = _spec(SCENARIO)
SOURCE, SOURCE_SPEC = next(iter(SPEC.sources.items()))
HOME = home_partition(SOURCE, PARTITIONS)
KEY = (SOURCE_SPEC.topic, HOME)
DAYS = 8


def _service(
    table: dict[str, Any], clock: StepClock, witness: Mapping[str, int] | None
) -> ReleaseService:
    return ReleaseService(
        SPEC,
        sampler=InsecureSeededSampler(4),
        state=table,
        clock=clock,
        topic_partitions={SOURCE_SPEC.topic: PARTITIONS},
        committed_offset=lambda topic, partition: 0,  # no record was ever committed
        closes_witnessed=None if witness is None else (lambda topic, partition: witness),
    )


def _run(
    table: dict[str, Any], days: range, *, witness: dict[str, int] | None = None
) -> tuple[dict[str, str], dict[int, dict[str, Any]], dict[str, int]]:
    """Tick at each day's release instant with no input: what was published, copies of the
    table after each day, and the witness the worker would commit (after each durable tick)."""
    clock = StepClock(release_instant(SPEC, days.start))
    service = _service(table, clock, witness)
    published: dict[str, str] = {}
    copies: dict[int, dict[str, Any]] = {}
    written = dict(witness or {})
    apply_writes(table, service.assign([HOME]).writes)
    for day in days:
        clock.value = release_instant(SPEC, day)
        outcome = service.tick()
        apply_writes(table, outcome.writes)
        published.update({f"{p.topic}/{p.key}": str(p.value) for p in outcome.publications})
        apply_writes(table, outcome.cleanup)
        written = witnessed_closes(witness_text(service.closes_by_partition()[KEY]))
        copies[day] = copy.deepcopy(table)
    return published, copies, written


def test_a_copy_that_only_missed_clock_closes_is_refused_by_the_witness() -> None:
    table: dict[str, Any] = {}
    published, copies, witness = _run(table, range(1, DAYS + 1))
    streams = sum(1 for s in SPEC.streams.values() if s.source == SOURCE)
    assert witness == {SOURCE: DAYS * streams}
    assert len(published) > 0
    older = copies[3]
    # the gap: the offset check alone takes the older copy (nothing was ever committed)
    _service(copy.deepcopy(older), StepClock(release_instant(SPEC, DAYS)), None).assign([HOME])
    with pytest.raises(StateError, match=rf"witnesses {DAYS * streams} periods closed.*closed "
                       rf"{3 * streams}\b"):  # fmt: skip
        _service(older, StepClock(release_instant(SPEC, DAYS)), witness).assign([HOME])
    with pytest.raises(StateError, match="holds none"):
        _service({}, StepClock(release_instant(SPEC, DAYS)), witness).assign([HOME])


def test_the_current_copy_loads_with_the_witness_and_goes_on_as_the_uninterrupted_run() -> None:
    whole, _, _ = _run({}, range(1, DAYS + 1))
    table: dict[str, Any] = {}
    first, _, witness = _run(table, range(1, 5))
    rest, _, _ = _run(table, range(5, DAYS + 1), witness=witness)
    assert {**first, **rest} == whole


def test_the_witness_text_round_trips_and_other_metadata_is_no_witness() -> None:
    closed = {"orders": 40, "admissions": 7}
    text = witness_text(closed)
    assert text.startswith(PREFIX)
    assert witnessed_closes(text) == closed
    assert witness_text({}) == ""
    for other in (None, "", "some other program's note", PREFIX + "{not json", PREFIX + "[1]",
                  PREFIX + '{"a": -1, "b": true, "c": "3"}'):  # fmt: skip
        assert witnessed_closes(other) == {}
    many = {f"source-{i:04d}": 10**6 for i in range(500)}
    assert len(PREFIX + str(many)) > MAX_WITNESS_BYTES
    assert witness_text(many) == ""  # a broker would refuse it: none is written


def test_check_closes_refuses_only_a_state_that_closed_fewer() -> None:
    check_closes("s", "t", 0, witnessed=5, stored=5)
    check_closes("s", "t", 0, witnessed=5, stored=9)
    check_closes("s", "t", 0, witnessed=0, stored=None)
    with pytest.raises(StateError, match="closed 4"):
        check_closes("s", "t", 0, witnessed=5, stored=4)


def test_a_commit_writes_this_workers_witness_else_keeps_the_groups() -> None:
    witnesses = CloseWitnesses()
    assert witnesses.metadata_for("t", 0, "") == ""
    witnesses.on_broker["t", 0] = PREFIX + '{"s":3}'
    assert witnesses.metadata_for("t", 0, "") == PREFIX + '{"s":3}'  # never erased
    assert not witnesses.pending("t", 0)
    witnesses.to_write["t", 0] = PREFIX + '{"s":4}'
    assert witnesses.pending("t", 0)
    assert witnesses.metadata_for("t", 0, "") == PREFIX + '{"s":4}'
    witnesses.on_broker["t", 0] = PREFIX + '{"s":4}'  # the commit was accepted
    assert not witnesses.pending("t", 0)
    assert witnesses.witnessed("t", 0) == {"s": 4}
    witnesses.forget({("t", 0)})
    assert witnesses.metadata_for("t", 0, "") == PREFIX + '{"s":4}'
    witnesses.to_write.update({("t", 0): "a", ("t", 1): "b"})
    witnesses.keep_only({("t", 1)})  # a new assignment
    assert witnesses.to_write == {("t", 1): "b"}
