"""Engine.consume (the daemon's per-record path) against Engine.ingest + advance_watermark.

``consume`` counts the common well-formed event without building a result object and hands
everything else to the general path. These tests prove the two forms are the same function:
same outputs in the same order, same result kind, same state, over every kind of bad input the
generators make, hand-made edge cases, re-delivered offsets and shuffled time order.
"""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.engine import Engine, parse_spec
from streamdp.engine.engine import ACCEPTED, NOT_COUNTED, SKIPPED
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import SCENARIOS, example_spec, generate

# records the generators never make, each near a boundary of the fast path's checks
ODD_RECORDS: list[dict[str, Any] | str] = [
    {"event_id": "odd-1", "event_time": True, "items": {"cola": 1}},
    {"event_id": "", "event_time": "2024-01-02T00:00:00Z", "items": {"cola": 1}},
    {"event_id": "x" * 201, "event_time": "2024-01-02T00:00:00Z", "items": {"cola": 1}},
    {"event_id": "x" * 200, "event_time": 1704153600, "attributes": {"hiv_positive": True}},
    {"event_id": 7, "event_time": "2024-01-02T00:00:00Z"},
    {"event_id": "odd-2", "event_time": "2024-01-02T00:00:00", "items": {"cola": 1}},
    {"event_id": "odd-3", "event_time": "2024-01-02T00:00:00Z", "source": ["x"]},
    {"event_id": "odd-4", "event_time": "2024-01-02T00:00:00Z", "type": "other"},
    {"type": "control", "action": "watermark", "time": 1704240000, "source": ["x"]},
    {"type": "control", "action": "watermark", "time": 1704240000},
    {"type": "control", "action": "close", "stream": ["x"], "through": 1704240000},
    "[1, 2]",
    '{"event_id": "odd-5"} trailing',
    '  {"event_id": "odd-6", "event_time": 1704153600, "items": {"cola": 1}}  ',
]


def _texts(scenario: str, seed: int, bad: float) -> list[bytes]:
    spec = example_spec(scenario)
    source = next(iter(spec.sources.values()))
    lines = [
        line.text for line in generate(scenario, 12, 6, seed=seed, bad_fraction=bad, spec=spec)
    ]
    rng = random.Random(seed)
    odd = []
    for record in ODD_RECORDS:
        if isinstance(record, str):
            odd.append(record)
        elif "type" in record:
            odd.append(json.dumps(record))
        else:
            odd.append(json.dumps({"source": source.name, **record}))
    for text in odd:
        lines.insert(rng.randrange(len(lines) + 1), text)
    # events naming their source by its topic, and a few out of time order
    for _ in range(5):
        i = rng.randrange(len(lines))
        data = _object(lines[i])
        if data is not None and "event_id" in data:
            data["source"] = source.topic
            lines[i] = json.dumps(data)
    for _ in range(8):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return [text.encode() for text in lines]


def _object(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _positions(n: int, seed: int) -> list[int]:
    """Offsets 0..n-1 in order, with runs re-delivered as after a crash."""
    rng = random.Random(seed)
    out: list[int] = []
    for offset in range(n):
        out.append(offset)
        if rng.random() < 0.03 or offset == n // 2:
            out.extend(range(max(0, offset - rng.randrange(1, 6)), offset + 1))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from(SCENARIOS),
    seed=st.integers(0, 10_000),
    bad=st.sampled_from([0.0, 0.2, 0.6]),
)
def test_consume_is_ingest_then_advance_watermark(scenario: str, seed: int, bad: float) -> None:
    spec = example_spec(scenario)
    topic = next(iter(spec.sources.values())).topic
    fast = Engine(spec, sampler=InsecureSeededSampler(5))
    general = Engine(spec, sampler=InsecureSeededSampler(5))
    texts = _texts(scenario, seed, bad)
    kinds = set()
    for offset in _positions(len(texts), seed):
        text = texts[offset]
        out: list[Any] = []
        code = fast.consume(text, topic, 0, offset, out)
        result = general.ingest(text, source_topic=topic, partition=0, offset=offset)
        expected = [*result.dead_letters, *result.outputs]
        if result.event_time is not None:
            expected += general.advance_watermark(result.event_time, source=result.source)
        assert [o.to_json() for o in out] == [o.to_json() for o in expected], (offset, text)
        want = SKIPPED if result.skipped else ACCEPTED if result.accepted else NOT_COUNTED
        assert code == want, (offset, text)
        kinds.add(code)
    assert fast.snapshot() == general.snapshot()
    assert kinds >= {SKIPPED, ACCEPTED, NOT_COUNTED}


def test_consume_refuses_a_bad_watermark_source_without_raising() -> None:
    """An unhashable 'source' in a watermark control record once raised TypeError."""
    spec = example_spec("restaurant")
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    record = {"type": "control", "action": "watermark", "time": 1704240000, "source": ["x"]}
    out: list[Any] = []
    assert engine.consume(json.dumps(record).encode(), "restaurant-orders", 0, 0, out) == (
        NOT_COUNTED
    )
    assert [letter.reason for letter in out] == ["unknown_source"]


def test_a_control_record_on_a_sources_topic_acts_on_that_source_only() -> None:
    """In the daemon each source has its own engine; a full engine must agree with it."""
    files = resources.files("streamdp").joinpath("examples")
    spec = parse_spec(
        files.joinpath("restaurant.toml").read_text("utf-8")
        + "\n"
        + files.joinpath("hospital.toml").read_text("utf-8")
    )
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    other = {"type": "control", "action": "close", "stream": "hiv-admissions", "through": 1e9}
    result = engine.ingest(
        json.dumps(other), source_topic="restaurant-orders", partition=0, offset=0
    )
    assert [r.reason for r in result.rejections] == ["unknown_stream"]
    assert "restaurant-items" in result.rejections[0].message
    # the same record on the control topic (or in a file) closes the stream it names
    assert engine.ingest(json.dumps(other)).ok


def _restaurant_spec(over_delta: str, delta: int) -> Any:
    text = files_text("restaurant.toml")
    text = text.replace("delta = 5\n", f'delta = {delta}\nover_delta = "{over_delta}"\n')
    return parse_spec(text).streams["restaurant-items"]


def files_text(name: str) -> str:
    return resources.files("streamdp").joinpath("examples", name).read_text("utf-8")


QUANTITIES = st.one_of(
    st.integers(-2, 4),
    st.sampled_from([True, False, 1.0, 2.0, None, "1", [1], {"q": 1}]),
)
ITEM_NAMES = st.sampled_from(["cola", "burger", "wings", "fries", "nuggets", "pizza"])


@settings(max_examples=400, deadline=None)
@given(
    items=st.one_of(
        st.dictionaries(ITEM_NAMES, QUANTITIES, max_size=6),
        st.sampled_from(
            [
                {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1},
                {"cola": 2, "burger": True, "wings": 1, "nuggets": 1},
                {"cola": 2.0, "burger": 1, "wings": 1, "nuggets": 1},
                {"burger": 2, "wings": 2, "fries": 1, "cola": 0},
                {"cola": 1, "burger": 1, "fries": 1, "nuggets": 1},
                [["cola", 1]],
                None,
            ]
        ),
    ),
    setting=st.sampled_from([("reject", 5), ("reject", 7)]),  # combos need delta >= 5, reject
)
def test_the_exact_combo_lookup_gives_what_the_item_by_item_check_gives(
    items: Any, setting: tuple[str, int]
) -> None:
    """The one-lookup path for orders that are exactly a combo (within delta) against the
    general check, on every kind of quantity JSON can carry (True == 1 and 1.0 == 1 in a set)."""
    from streamdp.engine.events import ItemExtractor, RejectedError

    extractor = ItemExtractor(_restaurant_spec(*setting))
    assert extractor.exact_combos  # the path under test exists in every setting
    event = {"items": items}

    def outcome(function: Any) -> Any:
        try:
            return ("ok", list(function()))
        except RejectedError as rejected:
            return (rejected.reason, rejected.message)

    assert outcome(lambda: extractor.contribution(event)) == outcome(
        lambda: extractor._checked(items)
    )
