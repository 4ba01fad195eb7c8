"""The daemon's release service without Kafka: batch protocol, crash recovery, routing.

What these tests prove:
- driving the service in batches over a plain dict (standing in for the Faust table) releases
  exactly what a file replay of the same records releases (same seed);
- a crash at any point of the checkpoint protocol (before the writes are durable, after the writes
  but before publishing, after publishing but before acknowledging) followed by a restart from the
  stored state and re-delivery of every unacknowledged record gives, per output key, exactly the
  values of an uninterrupted run, publishes every key, and draws no noise twice;
- records not keyed by their source, or on another partition than the source's home, are
  dead-lettered before touching any state; control records act only from the control topic.

Time: every service here runs on a test clock (:class:`StepClock`) set before each batch, as a
worker's wall clock would be read; the reference replay advances an engine to the same
readings, so both see every record arrive at the same public instant.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from scenario_specs import UNIT_KEY, scenario_spec
from service_steps import apply_writes as _apply
from service_steps import batch_then_tick, process_and_tick
from test_engine_support import arrivals_following, drive

from streamdp.daemon.checkpoint import join_snapshot
from streamdp.daemon.routing import InputRecord, OutputTopics, home_partition
from streamdp.daemon.service import ReleaseService
from streamdp.engine import Engine
from streamdp.errors import StateError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import example_spec, generate, release_instant

TOPICS = OutputTopics()
START = 1704067200.0  # 2024-01-01T00:00:00Z, where the example streams start


def _spec(scenario: str) -> Any:
    """An example spec; ``restaurant+kary_gls`` (or another mechanism after ``+``): the
    restaurant with that mechanism and 8-day epochs, so a short run rolls several epochs."""
    base, _, mechanism = scenario.partition("+")
    if base in ("census", "hospital-patients", "county-admissions"):
        return scenario_spec(scenario)  # short epochs; zCDP, privacy units, places
    if not mechanism:
        return example_spec(base)
    import importlib.resources

    from streamdp.engine import parse_spec

    text = importlib.resources.files("streamdp").joinpath("examples", f"{base}.toml")
    text = text.read_text("utf-8").replace("horizon = 366", "horizon = 8")
    return parse_spec(text.replace('mechanism = "fda"', f'mechanism = "{mechanism}"'))


class StepClock:
    """A public clock the test sets by hand (a worker reads its wall clock instead)."""

    def __init__(self, value: float = START) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


def _service(spec: Any, state: dict[str, Any], clock: StepClock | None = None, **kw: Any) -> Any:
    return ReleaseService(
        spec, sampler=kw.pop("sampler", InsecureSeededSampler(1)), state=state,
        clock=clock or StepClock(), **kw,
    )  # fmt: skip


class CountingSampler:
    """Seeded labelled sampler that remembers every label it drew (to catch redraws)."""

    name = "insecure-seeded-numpy"
    secure = False

    def __init__(self, seed: int, drawn: list[str]) -> None:
        self.inner = InsecureSeededSampler(seed)
        self.drawn = drawn

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        self.drawn.append(label)
        return self.inner.discrete_laplace(scale, size, label=label)

    gaussian_name = "insecure-seeded-numpy-gaussian"

    def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> np.ndarray:
        self.drawn.append(label)
        return self.inner.discrete_gaussian(sigma, size, label=label)


def _records(
    scenario: str, periods: int, rate: float, bad: float = 0.0
) -> tuple[list[InputRecord], list[float]]:
    """The scenario's records on partition 0 and, per record, a test clock reading that follows
    the data (see test_engine_support.arrivals_following)."""
    spec = _spec(scenario)
    lines = list(generate(scenario.partition("+")[0], periods, rate, seed=3, bad_fraction=bad))
    topic = next(iter(spec.sources.values())).topic
    source = next(iter(spec.sources))
    out = [
        InputRecord(topic, 0, offset, source.encode(), line.text.encode())
        for offset, line in enumerate(lines)
    ]
    return out, [max(START, t) for t in arrivals_following(lines)]


def _replay(
    scenario: str, records: list[InputRecord], arrivals: list[float], batch: int, final: float
) -> dict[str, str]:
    """A plain engine advanced to the clock reading of each batch before its records."""
    spec = _spec(scenario)
    engine = Engine(spec, sampler=InsecureSeededSampler(9), unit_key=UNIT_KEY)
    published: dict[str, str] = {}
    outs: list[Any] = []
    for first in range(0, len(records), batch):
        outs += engine.advance_clock(arrivals[first])
        for r in records[first : first + batch]:
            result = engine.ingest(
                r.value, source_topic=r.topic, partition=r.partition, offset=r.offset
            )
            outs += result.dead_letters
    outs += engine.advance_clock(final)
    for o in outs:
        published[f"{TOPICS.for_record(o)}/{o.key}"] = o.to_json()
    return published


def _run(
    scenario: str,
    records: list[InputRecord],
    arrivals: list[float],
    *,
    batch: int,
    crash_plan: dict[int, str],
    final: float,
) -> tuple[dict[str, str], list[str]]:
    """Drive services batch by batch; ``crash_plan[batch_no]`` names where the process dies.
    The clock reads ``arrivals[i]`` when the batch starting at record ``i`` is processed (a
    re-delivered batch starts at the same record, so it reads the same); a last tick at
    ``final`` closes what is left."""
    spec = _spec(scenario)
    state: dict[str, Any] = {}
    drawn: list[str] = []
    published: dict[str, str] = {}
    acked = 0  # records before this index are acknowledged (their offsets committed)
    clock = StepClock()

    def service() -> ReleaseService:
        return ReleaseService(
            spec, sampler=CountingSampler(9, drawn), state=state, topics=TOPICS, clock=clock,
            unit_key=UNIT_KEY,
        )  # fmt: skip

    def publish(outcome: Any) -> None:
        for p in outcome.publications:
            key = f"{p.topic}/{p.key}"
            if p.topic == TOPICS.releases:
                assert published.get(key, p.value) == p.value, "a release changed on republication"
            if p.topic == TOPICS.consistent and key in published:
                # a compacted topic keeps the latest revision; never go back to an older one
                assert json.loads(p.value)["revision"] >= json.loads(published[key])["revision"]
            published[key] = p.value

    svc = service()
    batch_no = 0
    while acked < len(records):
        chunk = records[acked : acked + batch]
        clock.value = arrivals[acked]
        outcome = process_and_tick(svc, chunk)
        where = crash_plan.get(batch_no)
        batch_no += 1
        if where == "before-writes":
            svc = service()
            continue
        if where == "mid-writes":  # everything but the hot state, which is written last
            _apply(state, outcome.writes[:-1])
            svc = service()
            continue
        if where == "half-writes":  # some event-id chunks and nodes, nothing after them
            _apply(state, outcome.writes[: len(outcome.writes) // 2])
            svc = service()
            continue
        _apply(state, outcome.writes)
        if where == "before-publish":
            svc = service()
            continue
        publish(outcome)
        if where == "before-ack":
            svc = service()
            continue
        _apply(state, outcome.cleanup)
        acked += len(chunk)
    clock.value = final
    while True:
        outcome = svc.tick()
        _apply(state, outcome.writes)
        publish(outcome)
        _apply(state, outcome.cleanup)
        if not svc.due():
            break
    return published, drawn


def _without_dead_letters(published: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in published.items() if not k.startswith(TOPICS.dead_letter)}


@pytest.mark.parametrize("scenario", ["restaurant", "hospital", "restaurant+kary_gls"])
def test_batched_service_releases_what_a_replay_releases(scenario: str) -> None:
    records, arrivals = _records(scenario, periods=40, rate=6)
    final = release_instant(_spec(scenario), 40)
    expected = _replay(scenario, records, arrivals, 17, final)
    got, drawn = _run(scenario, records, arrivals, batch=17, crash_plan={}, final=final)
    assert got == expected
    assert any(k.startswith(TOPICS.consistent) for k in got)
    assert len(drawn) == len(set(drawn))


@pytest.mark.parametrize(
    "where", ["before-writes", "half-writes", "mid-writes", "before-publish", "before-ack"]
)
@pytest.mark.parametrize(
    "scenario",
    # and the newer state: the lattice BLT's buffers under zCDP, privacy units' admission
    # logs (with a unit over its bounds), a places tree with its consistency
    ["restaurant", "census+zcdp_blt", "hospital-patients", "county-admissions"],
)
def test_crash_anywhere_in_the_protocol_changes_no_published_value(
    where: str, scenario: str
) -> None:
    periods = 12 if scenario == "county-admissions" else 30  # 9,600 counters: fewer days
    records, arrivals = _records(scenario, periods=periods, rate=5, bad=0.1)
    final = release_instant(_spec(scenario), periods)
    clean, clean_drawn = _run(scenario, records, arrivals, batch=11, crash_plan={}, final=final)
    plan = dict.fromkeys(range(1, 200, 3), where)
    crashed, drawn = _run(scenario, records, arrivals, batch=11, crash_plan=plan, final=final)
    assert crashed == clean  # every key published, each with the uninterrupted value
    # noise that reached the state is never drawn again (a node stored by a checkpoint that
    # did not complete is reused); only draws that were never stored repeat
    published_labels = set(clean_drawn)
    assert set(drawn) == published_labels
    if where not in ("before-writes", "half-writes"):
        assert len(drawn) == len(set(drawn)), "a stored node was drawn twice"


def _on(record: InputRecord, partition: int, offset: int | None = None, key: bytes | None = None):  # type: ignore[no-untyped-def]
    return InputRecord(
        record.topic,
        partition,
        record.offset if offset is None else offset,
        record.key if key is None else key,
        record.value,
    )


def _events_only(scenario: str, periods: int, rate: float) -> list[InputRecord]:
    records, _ = _records(scenario, periods=periods, rate=rate)
    return [r for r in records if b'"control"' not in r.value]


def test_records_not_keyed_by_their_source_are_dead_lettered_untouched() -> None:
    spec = example_spec("restaurant")
    home = home_partition("restaurant-orders", 4)
    svc = _service(spec, {}, topic_partitions={"restaurant-orders": 4})
    good = _on(_events_only("restaurant", 2, 3)[0], home)
    wrong = _on(good, home, key=b"someone-else")
    outcome = process_and_tick(svc, [wrong])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    assert outcome.accepted == 0
    # the engine never saw it: the same record correctly keyed is accepted afterwards
    assert process_and_tick(svc, [_on(good, home, offset=1)]).accepted == 1


def test_a_wrongly_keyed_record_leaves_no_hole_in_the_applied_offsets() -> None:
    """A refused record between two good ones (or last before a restart) is not input lost
    below the worker: no InputGapError now, after a restart, or when it is re-delivered."""
    spec = example_spec("restaurant")
    home = home_partition("restaurant-orders", 4)
    events = [_on(r, home) for r in _events_only("restaurant", 2, 6)]
    first, second, third, fourth = events[:4]
    wrong = _on(second, home, offset=1, key=b"someone-else")
    state: dict[str, Any] = {}

    def service() -> ReleaseService:
        return _service(spec, state, topic_partitions={"restaurant-orders": 4})

    svc = service()
    outcome = process_and_tick(svc, [first, wrong])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    _apply(state, outcome.writes)
    # a restart right after the refused record: the next offset follows on
    svc = service()
    again = process_and_tick(svc, [wrong, third])  # the refused record re-delivered, then a new one
    assert (again.skipped, again.accepted, again.dead_letters) == (1, 1, [])
    wrong_again = _on(fourth, home, offset=3, key=b"someone-else")
    following = _on(fourth, home, offset=4)
    outcome = process_and_tick(svc, [wrong_again, following])
    assert outcome.accepted == 1
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]


def test_control_records_of_several_sources_share_the_control_topic() -> None:
    """Each source sees only its own control records: their offsets have holes by design."""
    from streamdp.engine import parse_spec

    spec = parse_spec(_combined_text())
    clock = StepClock()
    svc = _service(spec, {}, clock)
    orders = _events_only("restaurant", 3, 4)
    assert process_and_tick(svc, orders).accepted == len(orders)

    def close(offset: int, stream: str, through: str) -> InputRecord:
        source = spec.streams[stream].source
        value = {"type": "control", "action": "close", "stream": stream, "through": through}
        return InputRecord(TOPICS.control, 0, offset, source.encode(), json.dumps(value).encode())

    # Jan 4, 00:30: day 3 ended 30 min ago and waits for its hour of lateness; day 2 is due
    clock.value = START + 3 * 86400 + 1800
    outcome = process_and_tick(
        svc,
        [
            close(0, "restaurant-items", "2024-01-04T00:00:00Z"),
            close(1, "hiv-admissions", "2024-01-04T00:00:00Z"),  # January has not ended
            close(2, "restaurant-items", "2024-01-04T00:10:00Z"),
        ],
    )
    assert outcome.dead_letters == []
    assert [(r.stream, r.period) for r in outcome.releases if r.counter == "cola"] == [
        ("restaurant-items", 1),
        ("restaurant-items", 2),
        ("restaurant-items", 3),
    ]
    assert svc.slots["hospital-admissions"].engine.streams["hiv-admissions"].closed == 0


def test_a_control_record_is_read_once_and_a_strictly_malformed_one_still_reaches_its_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Routing and the engine share one decode of a control record (issue 15: it was parsed
    twice); a record the strict decoder refuses (NaN) but that names its stream is still
    refused by that source's engine, with the decoder's reason, as before."""
    from streamdp.daemon import routing as routing_module
    from streamdp.daemon import service as service_module
    from streamdp.engine import engine as engine_module
    from streamdp.engine.events import decode

    calls: list[bytes] = []

    def counting(record: Any) -> Any:
        calls.append(record)
        return decode(record)

    lenient = json.loads

    def counting_lenient(record: Any, **kwargs: Any) -> Any:
        calls.append(record)
        return lenient(record, **kwargs)

    monkeypatch.setattr(service_module, "decode", counting)
    monkeypatch.setattr(engine_module, "decode", counting)
    monkeypatch.setattr(routing_module.json, "loads", counting_lenient)
    spec = _spec("restaurant")
    stream = next(iter(spec.streams))
    clock = StepClock()
    svc = _service(spec, {}, clock)
    process_and_tick(svc, _events_only("restaurant", 2, 3))
    clock.value = START + 86400 + 1800
    calls.clear()
    close = {"type": "control", "action": "close", "stream": stream, "through": START + 86400}
    key = next(iter(spec.sources)).encode()
    outcome = process_and_tick(
        svc, [InputRecord(TOPICS.control, 0, 0, key, json.dumps(close).encode())]
    )
    assert outcome.dead_letters == []
    assert len(calls) == 1
    bad = json.dumps({**close, "through": float("nan")}).encode()  # NaN: not JSON
    outcome = process_and_tick(svc, [InputRecord(TOPICS.control, 0, 1, key, bad)])
    # "malformed" is the engine's refusal (an unrouted control record is "bad_control")
    assert [(d.reason, d.stream is None) for d in outcome.dead_letters] == [("malformed", True)]


def test_a_control_record_on_an_input_topic_is_refused_for_any_source() -> None:
    from streamdp.engine import parse_spec

    spec = parse_spec(_combined_text())
    clock = StepClock(START + 40 * 86400)
    svc = _service(spec, {}, clock)
    first = _events_only("restaurant", 2, 6)[0]
    process_and_tick(
        svc, [_on(first, 0, offset=0)]
    )  # late by now, but it starts the source's state
    while svc.due():  # the clock's own releases (paced), before the control records
        svc.tick()
    for offset, stream in enumerate(("hiv-admissions", "restaurant-items"), start=1):
        close = {"type": "control", "action": "close", "stream": stream, "through": START + 1e6}
        misplaced = InputRecord(first.topic, 0, offset, first.key, json.dumps(close).encode())
        outcome = process_and_tick(svc, [misplaced])
        assert [d.reason for d in outcome.dead_letters] == ["control_on_input"]
        assert outcome.releases == []


@pytest.mark.parametrize("scenario", ["restaurant+fda", "restaurant+kary_gls"])
def test_the_hot_state_and_the_nodes_taken_rebuild_the_engine_snapshot(scenario: str) -> None:
    """Issue 15: a checkpoint stores the change sets' hot states and the nodes taken since
    the last one. Taken in steps over several epochs, every node comes exactly once, the hot
    state holds none, and hot state + nodes rebuild the full snapshot; a restored engine
    hands out nothing (its nodes are stored already) until it draws a new one."""
    spec = _spec(scenario)  # 8-day epochs
    engine = Engine(spec, sampler=InsecureSeededSampler(2))
    lines = [line.text for line in generate("restaurant", 20, 4, seed=1)]
    nodes: dict[tuple[str, int, int], list[int]] = {}
    for day in (3, 9, 10, 17):
        engine.advance_clock(START + day * 86400 + 3600)
        for line in lines:
            engine.ingest(line)
        taken = engine.take_changes().new_nodes
        assert not set(taken) & set(nodes), "a node was handed out twice"
        nodes.update(taken)
    last = engine.take_changes()
    assert last.new_nodes == {}
    assert {e for _, e, _ in nodes} == {0, 1, 2}
    hot = json.loads(json.dumps(last.hot_state))
    assert "noisy_nodes" not in json.dumps(hot)
    assert "past_nodes" not in json.dumps(hot)
    drawn = engine.epoch_noise()

    def noise(stream: str, epoch: int) -> list[list[int]] | None:
        return drawn[stream][1].tolist() if drawn[stream][0] == epoch else None

    rebuilt = join_snapshot(hot, lambda s, e, t: nodes.get((s, e, t)), noise)
    assert rebuilt == json.loads(json.dumps(engine.snapshot(with_seen=False)))
    # epochs 0 and 1 were revised whole (at their ends) and handed out: retired, so the
    # state refers to epoch 2's nodes only and a missing one of those refuses the restore
    assert [run[0] for run in hot["streams"][next(iter(spec.streams))]["node_counts"]] == [2]
    missing = next(key for key in nodes if key[1] == 2)
    with pytest.raises(StateError, match="missing"):
        join_snapshot(hot, lambda s, e, t: None if (s, e, t) == missing else nodes[(s, e, t)])
    restored = Engine(spec, sampler=InsecureSeededSampler(2))
    restored.restore(engine.snapshot())
    assert restored.take_changes().new_nodes == {}
    restored.advance_clock(START + 18 * 86400 + 3600)  # closes day 18: epoch 2's node 2
    assert set(restored.take_changes().new_nodes) >= {(next(iter(spec.streams)), 2, 2)}


def test_records_of_a_source_on_another_partition_than_its_home_are_refused() -> None:
    """A producer with a different partitioner must not split a source's state in two: the
    home is the partition the default partitioner maps the source name to, whatever arrives
    first."""
    spec = example_spec("restaurant")
    home = home_partition("restaurant-orders", 4)
    other = (home + 1) % 4
    svc = _service(spec, {}, topic_partitions={"restaurant-orders": 4})
    first, second = _events_only("restaurant", 2, 3)[:2]
    moved = process_and_tick(
        svc, [_on(first, other, offset=0)]
    )  # first, but not on the home partition
    assert [d.reason for d in moved.dead_letters] == ["wrong_partition_key"]
    assert "restaurant-orders" not in svc.slots
    assert process_and_tick(svc, [_on(second, home, offset=0)]).accepted == 1
    again = process_and_tick(svc, [_on(first, other, offset=1)])
    assert [d.reason for d in again.dead_letters] == ["wrong_partition_key"]
    assert again.accepted == 0


@pytest.mark.parametrize("committed", [0, 10])
def test_a_control_record_off_the_home_partition_never_makes_a_second_owner(
    committed: int,
) -> None:
    """Audit of 2026-11-28: a close record keyed by the source but placed by another client's
    partitioner on a control partition that is not the source's home reached a worker that did
    not own the home; it started the source there, and both workers released the same periods
    with independent noise (averaging them halves the variance), or, where that partition had
    commits, the worker refused its state and crash-looped. The record is dead-lettered as
    misplaced; the owner alone releases."""
    spec = example_spec("restaurant")
    source, n = "restaurant-orders", 4
    home = home_partition(source, n)
    other = (home + 1) % n
    clock = StepClock()
    clock.value = START + 4 * 86400 + 12 * 3600

    def worker(seed: int) -> ReleaseService:
        return ReleaseService(
            spec,
            sampler=InsecureSeededSampler(seed),
            state={},
            topic_partitions={source: n, TOPICS.control: n},
            clock=clock,
            # the bystander's partition has commits of its own (or none)
            committed_offset=lambda _topic, partition: committed if partition == other else 0,
        )

    owner, bystander = worker(1), worker(2)
    _apply(owner.state, owner.assign([home]).writes)
    _apply(bystander.state, bystander.assign([other]).writes)
    value = {"type": "control", "action": "close", "stream": "restaurant-items"}
    value["through"] = "2024-01-03T00:00:00Z"
    misplaced = InputRecord(TOPICS.control, other, 0, source.encode(), json.dumps(value).encode())
    outcome = bystander.process([misplaced])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    assert source not in bystander.slots
    assert bystander.tick().releases == []
    assert owner.tick().releases != []  # the owner releases the due days, alone


def test_an_assigned_home_partition_starts_its_sources_and_the_clock_releases_them() -> None:
    """Periods are released on schedule even when no record ever arrives."""
    spec = example_spec("restaurant")
    home = home_partition("restaurant-orders", 4)
    clock = StepClock()
    state: dict[str, Any] = {}
    svc = _service(spec, state, clock, topic_partitions={"restaurant-orders": 4})
    assert svc.assign({(home + 1) % 4}).writes == []  # not this source's home
    started = svc.assign({home})
    assert "restaurant-orders" in svc.slots
    _apply(state, started.writes)
    clock.value = START + 3 * 86400 + 3600  # Jan 4, 01:00: days 1-3 are due
    ticked = svc.tick()
    assert [r.period for r in ticked.releases if r.counter == "cola"] == [1, 2, 3]
    assert svc.tick().releases == []  # nothing more is due


def test_a_clock_jump_is_worked_off_in_paced_steps() -> None:
    spec = example_spec("restaurant")
    home = home_partition("restaurant-orders", 4)
    clock = StepClock()
    svc = _service(spec, {}, clock, topic_partitions={"restaurant-orders": 4}, pace=10)
    svc.assign({home})
    # 100 days at once: in April London is on summer time, so day 100 ended at 23:00 UTC and
    # its hour of lateness has passed too
    clock.value = START + 100 * 86400
    steps = []
    while True:
        steps.append(len([r for r in svc.tick().releases if r.counter == "cola"]))
        if not svc.due():
            break
    assert steps == [10] * 10, steps


def test_editing_another_sources_configuration_keeps_this_sources_state_restorable() -> None:
    from streamdp.engine import parse_spec

    text = _combined_text()
    state: dict[str, Any] = {}
    svc = _service(parse_spec(text), state)
    record = _events_only("restaurant", 2, 3)[0]
    _apply(state, process_and_tick(svc, [record]).writes)
    edited = text.replace(
        "epsilon_cap = 1.0\n\n[streams.admissions-census]",
        "epsilon_cap = 1.5\n\n[streams.admissions-census]",
    )
    assert edited != text
    again = _service(parse_spec(edited), state)
    process_and_tick(again, [record])  # restores the restaurant source without a StateError
    assert again.slots["restaurant-orders"].engine.stats.skipped == 1


def _combined_text() -> str:
    from importlib import resources

    files = resources.files("streamdp").joinpath("examples")
    return (
        files.joinpath("restaurant.toml").read_text("utf-8")
        + "\n"
        + files.joinpath("hospital.toml").read_text("utf-8")
    )


def test_a_hole_in_input_offsets_stops_the_batch_unless_holes_are_allowed() -> None:
    """Records skipped below the worker must never be silently passed over."""
    from streamdp.errors import InputGapError

    spec = example_spec("restaurant")
    records = _events_only("restaurant", 3, 4)[:4]
    after_hole = InputRecord(records[2].topic, 0, 7, records[2].key, records[2].value)
    strict = _service(spec, {})
    process_and_tick(strict, records[:2])
    with pytest.raises(InputGapError, match="jumped past records below the reader") as gap:
        process_and_tick(strict, [after_hole])
    # where the gap is counts the partition's records (input volume): a detail, not the message
    assert gap.value.offsets == "from offset 1 to 7"
    assert "offset 1" not in str(gap.value)
    assert "7" not in str(gap.value).split("]", 1)[1]
    lenient = _service(spec, {}, allow_gaps=True)
    process_and_tick(lenient, records[:2])
    assert process_and_tick(lenient, [after_hole]).accepted == 1


def test_a_hole_the_kafka_client_passed_over_is_not_a_lost_record() -> None:
    """Offsets the client passed over while reading a fetch (a transaction's commit marker)
    hold no record: a hole made only of them is accepted with holes refused; one offset that
    is not among them still stops the batch."""
    from streamdp.daemon.skipped_offsets import SkippedOffsets
    from streamdp.errors import InputGapError

    spec = example_spec("restaurant")
    records = _events_only("restaurant", 3, 4)[:4]
    topic = records[2].topic
    after_marker = InputRecord(topic, 0, 3, records[2].key, records[2].value)
    skipped = SkippedOffsets()
    skipped.add(topic, 0, 2, 3)  # offset 2: a commit marker
    service = _service(spec, {}, skipped_offsets=skipped)
    process_and_tick(service, records[:2])  # offsets 0 and 1
    assert process_and_tick(service, [after_marker]).accepted == 1
    beyond = InputRecord(topic, 0, 6, records[3].key, records[3].value)  # 4 and 5 were records
    skipped.add(topic, 0, 4, 5)
    with pytest.raises(InputGapError, match="jumped past records below the reader"):
        process_and_tick(service, [beyond])


@pytest.mark.parametrize("scenario", ["restaurant", "census"])
def test_revisions_report_one_exact_pass_and_a_residual_at_rounding_level(scenario: str) -> None:
    """The diagnostics exported as streamdp_consistency_* come from the revision itself."""
    spec = example_spec(scenario)
    engine = Engine(spec, sampler=InsecureSeededSampler(4))
    drive(engine, [line.text for line in generate(scenario, 30, 8, seed=2)])
    stats = [runtime.last_revision for runtime in engine.streams.values()]
    assert all(s is not None for s in stats)
    for s in stats:
        assert s is not None
        assert 0.0 <= s.residual < 1e-9
        assert s.seconds >= 0.0


def test_event_ids_are_stored_per_checkpoint_and_forgotten_with_their_period() -> None:
    """A period's content keys live in chunk keys, one per checkpoint that added some, not in
    the hot state (whose size stays flat however busy a period is); a duplicate sent after a
    restart is still refused; once a period closes its chunks are deleted."""
    spec = example_spec("restaurant")
    state: dict[str, Any] = {}
    lines = list(generate("restaurant", 3, 6000, seed=5))  # three busy days
    records = [
        InputRecord("restaurant-orders", 0, o, b"restaurant-orders", line.text.encode())
        for o, line in enumerate(lines)
    ]
    sizes = []

    def run(service: ReleaseService, batch: list[InputRecord]) -> Any:
        outcome = process_and_tick(service, batch)
        _apply(state, outcome.writes)
        _apply(state, outcome.cleanup)
        sizes.append(len(json.dumps(state["restaurant-orders"])))
        return outcome

    clock = StepClock()
    service = _service(spec, state, clock)
    first_day = [r for r in records if '"event_time": "2024-01-01' in r.value.decode()]
    assert len(first_day) > 4000
    half = len(first_day) // 2
    run(service, records[:half])
    run(service, records[half : len(first_day) - 1])
    chunks = sorted(k for k in state if "|seen|" in k)
    assert len(chunks) == 2, chunks  # one chunk per checkpoint that added ids
    stored = {i for k in chunks for i in state[k]}
    assert len(stored) == len(first_day) - 1
    # each checkpoint wrote only the ids it added (issue 15: O(new ids), not a set difference)
    assert sum(len(state[k]) for k in chunks) == len(stored)
    assert max(sizes) < 20_000, "the hot state grew with the number of events"

    # a restarted service (state from the table only) still knows every id of the open day
    restarted = _service(spec, state, clock)
    again = InputRecord(
        "restaurant-orders", 0, len(first_day) - 1, b"restaurant-orders", records[0].value
    )
    outcome = run(restarted, [again])
    assert [d.reason for d in outcome.dead_letters] == ["duplicate_event"]

    # the rest arrives on Jan 3: days 1 and 2 close, their chunks go, open periods keep theirs
    clock.value = START + 2 * 86400 + 3600
    run(restarted, records[len(first_day) :])
    left = {k.split("|")[3] for k in state if "|seen|" in k}
    open_periods = {
        str(j)
        for j in restarted.engines()["restaurant-orders"].streams["restaurant-items"].seen_ids()
    }
    assert left == open_periods
    assert "0" not in left


def test_event_ids_of_a_hot_state_that_held_them_are_stored_as_chunks_at_the_next_checkpoint() -> (
    None
):
    """A checkpoint written before event ids had keys of their own kept them in the hot state.
    Loading it, the next checkpoint stores them all as chunks (the service counts none as
    stored), so a duplicate is still refused after a second restart from the new layout."""
    spec = example_spec("restaurant")
    state: dict[str, Any] = {}
    lines = list(generate("restaurant", 1, 300, seed=5))
    records = [
        InputRecord("restaurant-orders", 0, o, b"restaurant-orders", line.text.encode())
        for o, line in enumerate(lines)
    ]
    clock = StepClock()
    first = _service(spec, state, clock)
    outcome = process_and_tick(first, records[:-1])
    _apply(state, outcome.writes)
    # rewrite the stored state in the old layout: the ids inside the hot state, no chunks
    hot = state["restaurant-orders"]
    engine = first.engines()["restaurant-orders"]
    ids = engine.streams["restaurant-items"].seen_ids()
    hot["streams"]["restaurant-items"]["seen"] = [[j, sorted(k)] for j, k in ids.items()]
    hot["daemon"]["seen_chunks"] = []
    for key in [k for k in state if "|seen|" in k]:
        del state[key]
    second = _service(spec, state, clock)
    outcome = process_and_tick(second, [records[-1]])
    _apply(state, outcome.writes)
    stored = [i for k in state if "|seen|" in k for i in state[k]]
    now_counted = second.engines()["restaurant-orders"].streams["restaurant-items"].seen_ids()
    assert sorted(stored) == sorted(i for k in now_counted.values() for i in k)
    assert {i for k in ids.values() for i in k} < set(stored)
    assert "seen" not in state["restaurant-orders"]["streams"]["restaurant-items"]
    third = _service(spec, state, clock)  # from the chunks alone
    again = InputRecord(
        "restaurant-orders", 0, len(records), b"restaurant-orders", records[0].value
    )
    assert [d.reason for d in process_and_tick(third, [again]).dead_letters] == ["duplicate_event"]


def test_state_chunks_stay_bounded_whatever_the_event_ids_look_like() -> None:
    """Issue 17: 6,000 orders with 200-character (or CJK) ids made a 1.0-1.1 MB event-id chunk,
    over the producer's 1,000,000-byte limit. Chunks now hold fixed-size content digests, at
    most SEEN_CHUNK_KEYS of them."""
    from streamdp.daemon.checkpoint_writer import MAX_SEEN_CHUNK_BYTES, SEEN_CHUNK_KEYS

    spec = example_spec("restaurant")
    combo = {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1}
    records = []
    for k in range(40_000):
        event_id = ("訂" * 43 if k % 2 else "x" * 200)[:-6] + f"{k:06d}"
        value = {"event_id": event_id, "event_time": START + 3600 + k * 0.5, "items": combo}
        records.append(
            InputRecord("restaurant-orders", 0, k, b"restaurant-orders", json.dumps(value).encode())
        )
    outcome = process_and_tick(_service(spec, {}), records)
    assert outcome.accepted == 40_000
    chunks = [w for w in outcome.writes if "|seen|" in w.key]
    assert len(chunks) == 3  # 40,000 keys in chunks of at most 16,384
    for write in chunks:
        assert len(write.value) <= SEEN_CHUNK_KEYS
        assert len(json.dumps(write.value).encode()) <= MAX_SEEN_CHUNK_BYTES < 1_000_000


EPOCHS = 1000  # horizon-1 periods, one epoch each


def test_the_hot_state_does_not_grow_with_epochs() -> None:
    """Issue 17: a horizon-1 stream rolls an epoch every period; its hot state grew ~88 bytes
    per epoch (ledger entries, per-epoch node counts) past the producer's 1 MB limit. Ledger
    spends and node counts are now stored as runs, so the state stays the same size."""
    from streamdp.engine import parse_spec

    spec = parse_spec(
        '[sources.s]\ntopic = "s"\nkind = "person"\nepsilon_cap = 1\n'
        '[streams.x]\nsource = "s"\nepsilon = 1\nsensitivity = 1\nhorizon = 1\n'
        'period = { unit = "fixed", start = "2024-01-01T00:00:00Z", length = 60 }\n'
        'counters = { kind = "flag", field = "f" }\n'
    )
    clock = StepClock()
    state: dict[str, Any] = {}
    svc = _service(spec, state, clock)
    sizes = {}
    # a checkpoint writes the batch's new node and a hot state built without walking the nodes
    # (issue 15); what is left per close is the ledger's O(epochs) spend check (~0.4 us an epoch)
    for k in range(EPOCHS):
        clock.value = START + 60 * k + 30
        value = {"event_id": f"e{k}", "event_time": clock.value - 10, "attributes": {"f": True}}
        outcome = process_and_tick(svc, [InputRecord("s", 0, k, b"s", json.dumps(value).encode())])
        _apply(state, outcome.writes)
        _apply(state, outcome.cleanup)
        if k in (100, EPOCHS - 1):
            sizes[k] = len(json.dumps(state["s"]))
    assert sizes[EPOCHS - 1] - sizes[100] < 100, sizes  # a few digits longer, nothing per epoch
    # and it still restores: a new service continues from the stored state alone
    again = _service(spec, state, clock)
    clock.value += 60
    value = {"event_id": "last", "event_time": clock.value - 10, "attributes": {"f": True}}
    outcome = process_and_tick(
        again, [InputRecord("s", 0, EPOCHS, b"s", json.dumps(value).encode())]
    )
    assert outcome.accepted == 1
    assert [r.epoch for r in outcome.releases] == [EPOCHS - 1]
    assert again.engines()["s"].ledger.sequential_spent("s") == EPOCHS


@pytest.mark.parametrize(
    "where", ["before-writes", "half-writes", "mid-writes", "before-publish", "before-ack"]
)
def test_a_kary_streams_epoch_noise_is_stored_once_and_reused_after_any_crash(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kary_gls restaurant, 8-day epochs (several rolls), noise chunks of 3 rows: a crash
    anywhere in the protocol changes no published value; noise a checkpoint stored is never
    drawn again (each epoch's levels are drawn once per label), only noise no stored record
    used; and every chunk is written once."""
    import streamdp.daemon.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "NOISE_CHUNK_VALUES", 15)  # width 5: 3 rows a chunk
    scenario = "restaurant+kary_gls"
    records, arrivals = _records(scenario, periods=30, rate=5, bad=0.1)
    final = release_instant(_spec(scenario), 30)
    clean, clean_drawn = _run(scenario, records, arrivals, batch=11, crash_plan={}, final=final)
    assert len(clean_drawn) == len(set(clean_drawn))
    assert {label.split("|")[1] for label in clean_drawn} == {"e0", "e1", "e2", "e3"}
    plan = dict.fromkeys(range(1, 200, 3), where)
    crashed, drawn = _run(scenario, records, arrivals, batch=11, crash_plan=plan, final=final)
    assert crashed == clean
    assert set(drawn) == set(clean_drawn)
    if where not in ("before-writes", "half-writes"):
        assert len(drawn) == len(set(drawn)), "stored epoch noise was drawn twice"


def test_epoch_noise_is_written_in_bounded_chunks_before_any_output_and_never_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import streamdp.daemon.checkpoint as checkpoint
    from streamdp.daemon.checkpoint import NOISE_CHUNK_VALUES, noise_key

    monkeypatch.setattr(checkpoint, "NOISE_CHUNK_VALUES", 15)  # 3 rows a chunk
    spec = _spec("restaurant+kary_gls")
    records, arrivals = _records("restaurant+kary_gls", periods=20, rate=5)
    state: dict[str, Any] = {}
    clock = StepClock()
    drawn: list[str] = []
    svc = _service(spec, state, clock, sampler=CountingSampler(4, drawn), topics=TOPICS)
    written: list[str] = []
    for first in range(0, len(records), 9):
        clock.value = arrivals[first]
        for outcome in batch_then_tick(svc, records[first : first + 9]):
            keys = [w.key for w in outcome.writes]
            noise = [k for k in keys if "|noise|" in k]
            if noise:  # before every outbox record and the hot state of its checkpoint
                assert max(keys.index(k) for k in noise) < min(
                    i for i, k in enumerate(keys) if "|out|" in k or k == "restaurant-orders"
                )
            for w in outcome.writes:
                if "|noise|" in w.key:
                    assert len(w.value) * 5 <= 15
                    assert len(json.dumps(w.value).encode()) < 1_000_000
            written += noise
            _apply(state, outcome.writes)
            _apply(state, outcome.cleanup)
    assert len(written) == len(set(written)), "a noise chunk was written twice"
    assert {k.split("|")[3] for k in written} == {"0", "1", "2"}  # one set per epoch drawn
    # the hot state does not hold the noise (nor grow with it)
    hot = state["restaurant-orders"]
    assert hot["streams"]["restaurant-items"]["counter"]["node_noise"] is None
    assert len(json.dumps(hot)) < 20_000
    # a restart reuses it, drawing nothing; a missing chunk is refused, never redrawn
    before = len(drawn)
    again = _service(spec, dict(state), clock, sampler=CountingSampler(4, drawn))
    assert process_and_tick(again, [records[-1]]).skipped == 1  # loads the source; offset applied
    assert len(drawn) == before
    epoch = hot["streams"]["restaurant-items"]["counter"]["epoch"]
    broken = dict(state)
    del broken[noise_key("restaurant-orders", "restaurant-items", epoch, 1)]
    with pytest.raises(StateError, match=r"noise .* is missing"):
        process_and_tick(_service(spec, broken, clock), [records[-1]])
    assert NOISE_CHUNK_VALUES * 15 < 1_000_000  # the production bound, for any width


def test_noise_adopted_after_a_crash_survives_a_second_restart_before_its_epoch_starts() -> None:
    """A crash after the batch that rolled into epoch 1 wrote its noise (not its hot state);
    a restart adopts that noise and checkpoints without reaching epoch 1 (its hot state now
    lists the noise); a second restart must adopt it again: epoch 1 is drawn once and every
    published value is the uninterrupted run's."""
    scenario = "restaurant+kary_gls"
    spec = _spec(scenario)
    records, arrivals = _records(scenario, periods=20, rate=5)
    batches = list(range(0, len(records), 9))

    def fresh(state: dict[str, Any], clock: StepClock, drawn: list[str]) -> ReleaseService:
        return _service(spec, state, clock, sampler=CountingSampler(9, drawn), topics=TOPICS)

    def publish(outcome: Any, published: dict[str, str]) -> None:
        for p in outcome.publications:
            assert published.setdefault(f"{p.topic}/{p.key}", p.value) == p.value

    clean: dict[str, str] = {}
    clean_state: dict[str, Any] = {}
    clock = StepClock()
    svc = fresh(clean_state, clock, [])
    rolled = None
    for b, first in enumerate(batches):
        clock.value = arrivals[first]
        outcome = process_and_tick(svc, records[first : first + 9])
        if rolled is None and any("|noise|restaurant-items|1|" in w.key for w in outcome.writes):
            rolled = b
        _apply(clean_state, outcome.writes)
        publish(outcome, clean)
        _apply(clean_state, outcome.cleanup)
    assert rolled is not None
    assert rolled > 0

    state: dict[str, Any] = {}
    drawn: list[str] = []
    published: dict[str, str] = {}
    svc = fresh(state, clock, drawn)
    for first in batches[:rolled]:
        clock.value = arrivals[first]
        outcome = process_and_tick(svc, records[first : first + 9])
        _apply(state, outcome.writes)
        publish(outcome, published)
        _apply(state, outcome.cleanup)
    first = batches[rolled]
    clock.value = arrivals[first]
    outcome = process_and_tick(svc, records[first : first + 9])
    _apply(state, outcome.writes[:-1])  # crash: everything but the hot state
    # restart 1: the clock of the batch before, a re-delivered record: a checkpoint, no roll
    clock.value = arrivals[batches[rolled - 1]]
    again = fresh(state, clock, drawn)
    outcome = process_and_tick(again, [records[first - 1]])
    assert outcome.skipped == 1
    _apply(state, outcome.writes)
    publish(outcome, published)  # the outbox the crash left, made with epoch 1's noise
    _apply(state, outcome.cleanup)
    assert [1, 1] in [e[1:] for e in state["restaurant-orders"]["daemon"]["noise_chunks"]]
    # restart 2, then the rest of the input
    svc = fresh(state, clock, drawn)
    for first in batches[rolled:]:
        clock.value = arrivals[first]
        outcome = process_and_tick(svc, records[first : first + 9])
        _apply(state, outcome.writes)
        publish(outcome, published)
        _apply(state, outcome.cleanup)
    assert published == clean
    assert drawn.count("restaurant-items|e1|L0") == 1, "epoch 1's stored noise was redrawn"
