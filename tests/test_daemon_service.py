"""The daemon's release service without Kafka: batch protocol, crash recovery, routing.

What these tests prove:
- driving the service in batches over a plain dict (standing in for the Faust table) releases
  exactly what a file replay of the same records releases (same seed);
- a crash at any point of the checkpoint protocol (before the writes are durable, after the writes
  but before publishing, after publishing but before acknowledging) followed by a restart from the
  stored state and re-delivery of every unacknowledged record gives, per output key, exactly the
  values of an uninterrupted run, publishes every key, and draws no noise twice;
- records not keyed by their source are dead-lettered before touching any state.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from streamdp.daemon.checkpoint import join_snapshot, split_snapshot
from streamdp.daemon.service import InputRecord, OutputTopics, ReleaseService
from streamdp.engine import Engine
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import example_spec, generate

TOPICS = OutputTopics()


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


def _records(scenario: str, periods: int, rate: float, bad: float = 0.0) -> list[InputRecord]:
    spec = example_spec(scenario)
    out = []
    for offset, line in enumerate(generate(scenario, periods, rate, seed=3, bad_fraction=bad)):
        try:
            data = json.loads(line.text)
        except ValueError:
            data = {}
        stream = data.get("stream") if isinstance(data, dict) else None
        if isinstance(stream, str) and stream in spec.streams:
            source = spec.streams[stream].source
        else:
            source = next(iter(spec.sources))
        topic = spec.sources[source].topic
        out.append(InputRecord(topic, 0, offset, source.encode(), line.text.encode()))
    return out


def _replay(scenario: str, records: list[InputRecord]) -> dict[str, str]:
    spec = example_spec(scenario)
    engine = Engine(spec, sampler=InsecureSeededSampler(9))
    published: dict[str, str] = {}
    for r in records:
        result = engine.ingest(
            r.value, source_topic=r.topic, partition=r.partition, offset=r.offset
        )
        outs = list(result.outputs)
        if result.event_time is not None:
            outs += engine.advance_watermark(result.event_time, source=result.source)
        for o in outs:
            published[f"{TOPICS.for_record(o)}/{o.key}"] = o.to_json()
    return published


def _apply(state: dict[str, Any], writes: Any) -> None:
    for w in writes:
        if w.value is None:
            state.pop(w.key, None)
        else:
            state[w.key] = json.loads(json.dumps(w.value))  # what a JSON changelog keeps


def _run(
    scenario: str, records: list[InputRecord], *, batch: int, crash_plan: dict[int, str]
) -> tuple[dict[str, str], list[str]]:
    """Drive services batch by batch; ``crash_plan[batch_no]`` names where the process dies."""
    spec = example_spec(scenario)
    state: dict[str, Any] = {}
    drawn: list[str] = []
    published: dict[str, str] = {}
    acked = 0  # records before this index are acknowledged (their offsets committed)

    def service() -> ReleaseService:
        return ReleaseService(spec, sampler=CountingSampler(9, drawn), state=state, topics=TOPICS)

    svc = service()
    batch_no = 0
    while acked < len(records):
        chunk = records[acked : acked + batch]
        outcome = svc.process(chunk)
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
        for p in outcome.publications:
            key = f"{p.topic}/{p.key}"
            if p.topic == TOPICS.releases:
                assert published.get(key, p.value) == p.value, "a release changed on republication"
            if p.topic == TOPICS.consistent and key in published:
                # a compacted topic keeps the latest revision; never go back to an older one
                assert json.loads(p.value)["revision"] >= json.loads(published[key])["revision"]
            published[key] = p.value
        if where == "before-ack":
            svc = service()
            continue
        _apply(state, outcome.cleanup)
        acked += len(chunk)
    return published, drawn


def _without_dead_letters(published: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in published.items() if not k.startswith(TOPICS.dead_letter)}


@pytest.mark.parametrize("scenario", ["restaurant", "hospital"])
def test_batched_service_releases_what_a_replay_releases(scenario: str) -> None:
    records = _records(scenario, periods=40, rate=6)
    expected = _replay(scenario, records)
    got, drawn = _run(scenario, records, batch=17, crash_plan={})
    assert _without_dead_letters(got) == _without_dead_letters(expected)
    assert any(k.startswith(TOPICS.consistent) for k in got)
    assert len(drawn) == len(set(drawn))


@pytest.mark.parametrize(
    "where", ["before-writes", "half-writes", "mid-writes", "before-publish", "before-ack"]
)
def test_crash_anywhere_in_the_protocol_changes_no_published_value(where: str) -> None:
    records = _records("restaurant", periods=30, rate=5, bad=0.1)
    clean, clean_drawn = _run("restaurant", records, batch=11, crash_plan={})
    plan = dict.fromkeys(range(1, 200, 3), where)
    crashed, drawn = _run("restaurant", records, batch=11, crash_plan=plan)
    assert crashed == clean  # every key published, each with the uninterrupted value
    # noise that reached the state is never drawn again (a node stored by a checkpoint that
    # did not complete is reused); only draws that were never stored repeat
    published_labels = set(clean_drawn)
    assert set(drawn) == published_labels
    if where not in ("before-writes", "half-writes"):
        assert len(drawn) == len(set(drawn)), "a stored node was drawn twice"


def test_records_not_keyed_by_their_source_are_dead_lettered_untouched() -> None:
    spec = example_spec("restaurant")
    state: dict[str, Any] = {}
    svc = ReleaseService(
        spec,
        sampler=InsecureSeededSampler(1),
        state=state,
        topic_partitions={"restaurant-orders": 4},
    )
    good = _records("restaurant", periods=2, rate=3)[0]
    wrong = InputRecord(good.topic, 1, 0, b"someone-else", good.value)
    outcome = svc.process([wrong])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    assert outcome.accepted == 0
    # the engine never saw it: the same record correctly keyed is accepted afterwards
    assert svc.process([good]).accepted == 1


def test_a_wrongly_keyed_record_leaves_no_hole_in_the_applied_offsets() -> None:
    """A refused record between two good ones (or last before a restart) is not input lost
    below the worker: no InputGapError now, after a restart, or when it is re-delivered."""
    spec = example_spec("restaurant")
    events = [r for r in _records("restaurant", periods=2, rate=6) if b'"control"' not in r.value]
    first, second, third, fourth = events[:4]
    wrong = InputRecord(second.topic, 0, 1, b"someone-else", second.value)
    state: dict[str, Any] = {}

    def service() -> ReleaseService:
        return ReleaseService(
            spec,
            sampler=InsecureSeededSampler(1),
            state=state,
            topic_partitions={"restaurant-orders": 4},
        )

    svc = service()
    outcome = svc.process([first, wrong])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    _apply(state, outcome.writes)
    # a restart right after the refused record: the next offset follows on
    svc = service()
    again = svc.process([wrong, third])  # the refused record re-delivered, then a new one
    assert (again.skipped, again.accepted, again.dead_letters) == (1, 1, [])
    wrong_again = InputRecord(fourth.topic, 0, 3, b"someone-else", fourth.value)
    following = InputRecord(fourth.topic, 0, 4, fourth.key, fourth.value)
    outcome = svc.process([wrong_again, following])
    assert outcome.accepted == 1
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]


def test_control_records_of_several_sources_share_the_control_topic() -> None:
    """Each source sees only its own control records: their offsets have holes by design."""
    from streamdp.engine import parse_spec

    spec = parse_spec(_combined_text())
    svc = ReleaseService(spec, sampler=InsecureSeededSampler(1), state={})
    orders = [r for r in _records("restaurant", periods=3, rate=4) if b'"control"' not in r.value]
    assert svc.process(orders).accepted == len(orders)

    def close(offset: int, stream: str, through: str) -> InputRecord:
        source = spec.streams[stream].source
        value = {"type": "control", "action": "close", "stream": stream, "through": through}
        return InputRecord(TOPICS.control, 0, offset, source.encode(), json.dumps(value).encode())

    outcome = svc.process(
        [
            close(0, "restaurant-items", "2024-01-04T00:00:00Z"),
            close(1, "hiv-admissions", "2024-02-02T00:00:00Z"),
            close(2, "restaurant-items", "2024-01-05T00:00:00Z"),
        ]
    )
    assert outcome.dead_letters == []
    assert sorted({(r.stream, r.period) for r in outcome.releases}) == [
        ("hiv-admissions", 1),
        ("restaurant-items", 3),
        ("restaurant-items", 4),
    ]


def test_a_control_record_on_an_input_topic_acts_on_that_topics_source_only() -> None:
    from streamdp.engine import parse_spec

    spec = parse_spec(_combined_text())
    svc = ReleaseService(spec, sampler=InsecureSeededSampler(1), state={})
    events = [r for r in _records("restaurant", periods=2, rate=6) if b'"control"' not in r.value]
    first, _, third = events[:3]
    other = {"type": "control", "action": "close", "stream": "hiv-admissions", "through": 1e9}
    misplaced = InputRecord(first.topic, 0, 1, first.key, json.dumps(other).encode())
    outcome = svc.process([first, misplaced, third])
    assert [d.reason for d in outcome.dead_letters] == ["unknown_stream"]
    assert outcome.accepted == 2
    assert outcome.releases == []


def test_split_and_join_round_trip_an_engine_snapshot() -> None:
    spec = example_spec("hospital")
    engine = Engine(spec, sampler=InsecureSeededSampler(2))
    for line in generate("hospital", 20, 4, seed=1):
        r = engine.ingest(line.text)
        if r.event_time is not None:
            engine.advance_watermark(r.event_time, source=r.source)
    snapshot = json.loads(json.dumps(engine.snapshot()))
    hot, nodes = split_snapshot(snapshot)
    assert "noisy_nodes" not in json.dumps(hot)
    assert nodes
    rebuilt = join_snapshot(hot, lambda s, e, t: nodes.get((s, e, t)))
    assert rebuilt == snapshot
    missing = next(iter(nodes))
    with pytest.raises(Exception, match="missing"):
        join_snapshot(hot, lambda s, e, t: None if (s, e, t) == missing else nodes[(s, e, t)])


def test_records_of_a_source_on_another_partition_than_its_state_are_refused() -> None:
    """A producer with a different partitioner must not split a source's state in two."""
    spec = example_spec("restaurant")
    svc = ReleaseService(
        spec,
        sampler=InsecureSeededSampler(1),
        state={},
        topic_partitions={"restaurant-orders": 4},
    )
    first, second = _records("restaurant", periods=2, rate=3)[:2]
    assert svc.process([first]).accepted == 1  # the state now lives on partition 0
    moved = InputRecord(second.topic, 3, 0, second.key, second.value)
    outcome = svc.process([moved])
    assert [d.reason for d in outcome.dead_letters] == ["wrong_partition_key"]
    assert outcome.accepted == 0


def test_editing_another_sources_configuration_keeps_this_sources_state_restorable() -> None:
    from streamdp.engine import parse_spec

    text = _combined_text()
    state: dict[str, Any] = {}
    svc = ReleaseService(parse_spec(text), sampler=InsecureSeededSampler(1), state=state)
    record = _records("restaurant", periods=2, rate=3)[0]
    _apply(state, svc.process([record]).writes)
    edited = text.replace(
        "epsilon_cap = 1.0\n\n[streams.admissions-census]",
        "epsilon_cap = 1.5\n\n[streams.admissions-census]",
    )
    assert edited != text
    again = ReleaseService(parse_spec(edited), sampler=InsecureSeededSampler(1), state=state)
    again.process([record])  # restores the restaurant source without a StateError
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
    records = _records("restaurant", periods=3, rate=4)[:4]
    after_hole = InputRecord(records[2].topic, 0, 7, records[2].key, records[2].value)
    strict = ReleaseService(spec, sampler=InsecureSeededSampler(1), state={})
    strict.process(records[:2])
    with pytest.raises(InputGapError, match="jumped from offset 1 to 7"):
        strict.process([after_hole])
    lenient = ReleaseService(spec, sampler=InsecureSeededSampler(1), state={}, allow_gaps=True)
    lenient.process(records[:2])
    assert lenient.process([after_hole]).accepted == 1


@pytest.mark.parametrize("scenario", ["restaurant", "census"])
def test_revisions_report_one_exact_pass_and_a_residual_at_rounding_level(scenario: str) -> None:
    """The diagnostics exported as streamdp_consistency_* come from the revision itself."""
    spec = example_spec(scenario)
    engine = Engine(spec, sampler=InsecureSeededSampler(4))
    for line in generate(scenario, 30, 8, seed=2):
        result = engine.ingest(line.text)
        if result.event_time is not None:
            engine.advance_watermark(result.event_time, source=result.source)
    stats = [runtime.last_revision for runtime in engine.streams.values()]
    assert all(s is not None for s in stats)
    for s in stats:
        assert s is not None
        assert s.iterations == 1
        assert 0.0 <= s.residual < 1e-9
        assert s.seconds >= 0.0


def test_event_ids_are_stored_per_checkpoint_and_forgotten_with_their_period() -> None:
    """A period's event ids live in chunk keys, one per checkpoint that added some, not in the
    hot state (whose size stays flat however busy a period is); a duplicate sent after a restart
    is still refused; once a period closes its chunks are deleted."""
    spec = example_spec("restaurant")
    state: dict[str, Any] = {}
    lines = list(generate("restaurant", 3, 6000, seed=5))  # three busy days
    records = [
        InputRecord("restaurant-orders", 0, o, b"restaurant-orders", line.text.encode())
        for o, line in enumerate(lines)
    ]
    sizes = []

    def run(service: ReleaseService, batch: list[InputRecord]) -> Any:
        outcome = service.process(batch)
        _apply(state, outcome.writes)
        _apply(state, outcome.cleanup)
        sizes.append(len(json.dumps(state["restaurant-orders"])))
        return outcome

    service = ReleaseService(spec, sampler=InsecureSeededSampler(1), state=state)
    first_day = [r for r in records if '"event_time": "2024-01-01' in r.value.decode()]
    assert len(first_day) > 4000
    half = len(first_day) // 2
    run(service, records[:half])
    run(service, records[half : len(first_day) - 1])
    chunks = sorted(k for k in state if "|seen|" in k)
    assert len(chunks) == 2, chunks  # one chunk per checkpoint that added ids
    stored = {i for k in chunks for i in state[k]}
    assert len(stored) == len(first_day) - 1
    assert max(sizes) < 20_000, "the hot state grew with the number of events"

    # a restarted service (state from the table only) still knows every id of the open day
    restarted = ReleaseService(spec, sampler=InsecureSeededSampler(1), state=state)
    again = InputRecord(
        "restaurant-orders", 0, len(first_day) - 1, b"restaurant-orders", records[0].value
    )
    outcome = run(restarted, [again])
    assert [d.reason for d in outcome.dead_letters] == ["duplicate_event"]

    # the rest closes days 1 and 2: their chunks go, only open periods keep any
    run(restarted, records[len(first_day) :])
    left = {k.split("|")[3] for k in state if "|seen|" in k}
    open_periods = {
        str(j)
        for j in restarted.engines()["restaurant-orders"].streams["restaurant-items"].seen_ids()
    }
    assert left == open_periods
    assert "0" not in left
