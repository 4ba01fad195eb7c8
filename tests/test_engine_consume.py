"""Engine.consume (the daemon's per-record path) against Engine.ingest, under one clock.

``consume`` counts the common well-formed event without building a result object and hands
everything else to the general path. These tests prove the two forms are the same function:
same outputs in the same order, same result kind, same state, over every kind of bad input the
generators make, hand-made edge cases, re-delivered offsets and shuffled time order.
"""

from __future__ import annotations

import contextlib
import json
import random
from datetime import datetime
from importlib import resources
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.engine import Engine, parse_spec
from streamdp.engine.results import ACCEPTED, NOT_COUNTED, SKIPPED
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
    {"type": "control", "action": "close", "stream": "restaurant-items", "through": 1704240000},
    {"type": "control", "action": "close", "stream": ["x"], "through": 1704240000},
    "[1, 2]",
    '{"event_id": "odd-5"} trailing',
    '  {"event_id": "odd-6", "event_time": 1704153600, "items": {"cola": 1}}  ',
]

#: the key of the hospital-patients example's privacy units (a test key)
UNIT_KEY = b"consume-test-unit-key-0123456789"


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


def _arrivals(texts: list[bytes], positions: list[int]) -> list[float]:
    """A public clock for the test: it follows the largest plausible event time read so far
    (the same schedule for both engines compared)."""
    out: list[float] = []
    latest = 1704067200.0
    for offset in positions:
        data = _object(texts[offset].decode("utf-8", "replace"))
        when = data.get("event_time") if data is not None else None
        if isinstance(when, str) and when.startswith("2024-") and "T" in when:
            with contextlib.suppress(ValueError):
                latest = max(latest, datetime.fromisoformat(when).timestamp())
        out.append(latest)
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.sampled_from(SCENARIOS),
    seed=st.integers(0, 10_000),
    bad=st.sampled_from([0.0, 0.2, 0.6]),
)
def test_consume_is_ingest_under_the_same_clock(scenario: str, seed: int, bad: float) -> None:
    spec = example_spec(scenario)
    topic = next(iter(spec.sources.values())).topic
    fast = Engine(spec, sampler=InsecureSeededSampler(5), unit_key=UNIT_KEY)
    general = Engine(spec, sampler=InsecureSeededSampler(5), unit_key=UNIT_KEY)
    texts = _texts(scenario, seed, bad)
    positions = _positions(len(texts), seed)
    kinds = set()
    for offset, now in zip(positions, _arrivals(texts, positions), strict=True):
        text = texts[offset]
        out: list[Any] = [*fast.advance_clock(now)]
        expected: list[Any] = [*general.advance_clock(now)]
        code = fast.consume(text, topic, 0, offset, out)
        result = general.ingest(text, source_topic=topic, partition=0, offset=offset)
        expected += [*result.dead_letters, *result.outputs]
        assert [o.to_json() for o in out] == [o.to_json() for o in expected], (offset, text)
        want = SKIPPED if result.skipped else ACCEPTED if result.accepted else NOT_COUNTED
        assert code == want, (offset, text)
        kinds.add(code)
    assert fast.snapshot() == general.snapshot()
    assert kinds >= {SKIPPED, ACCEPTED, NOT_COUNTED}


def test_a_control_record_on_an_input_topic_is_refused_and_never_obeyed() -> None:
    """Any producer can write an input topic: a close there must not close anything."""
    files = resources.files("streamdp").joinpath("examples")
    spec = parse_spec(
        files.joinpath("restaurant.toml").read_text("utf-8")
        + "\n"
        + files.joinpath("hospital.toml").read_text("utf-8")
    )
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    engine.advance_clock(1704067200.0 + 86400 * 40)  # 2024-02-10: January has ended
    closed = {name: runtime.closed for name, runtime in engine.streams.items()}
    assert closed["restaurant-items"] == 39  # the clock closed every day due by then
    close = {"type": "control", "action": "close", "stream": "restaurant-items", "through": 2e9}
    for offset, record in enumerate((close, {"type": "control", "action": "watermark", "time": 2})):
        out: list[Any] = []
        code = engine.consume(json.dumps(record).encode(), "restaurant-orders", 0, offset, out)
        assert code == NOT_COUNTED
        assert [letter.reason for letter in out] == ["control_on_input"]
        result = engine.ingest(json.dumps(record))  # a file is input too
        assert [r.reason for r in result.rejections] == ["control_on_input"]
    assert {name: runtime.closed for name, runtime in engine.streams.items()} == closed
    # the operator's path: bounded by the clock (the future cannot be released)
    refused = engine.control(json.dumps(close))
    assert [r.reason for r in refused.rejections] == ["bad_control"]
    assert "after the worker's clock" in refused.rejections[0].message
    # day 40 (Feb 9) has ended but waits for its hour of allowed lateness: the close makes
    # it due now, and the clock's next step (the daemon's tick), not the record, releases it
    through = {**close, "through": "2024-02-10T00:00:00Z"}
    applied = engine.control(json.dumps(through))
    assert applied.ok
    assert applied.outputs == ()
    assert engine.streams["restaurant-items"].closed == 39
    assert engine.due()
    released = engine.close_due()
    assert [r.period for r in released if getattr(r, "counter", None) == "cola"] == [40]
    assert engine.streams["restaurant-items"].closed == 40
    assert engine.streams["hiv-admissions"].closed == closed["hiv-admissions"]
    watermark = engine.control(json.dumps({"type": "control", "action": "watermark", "time": 1}))
    assert [r.reason for r in watermark.rejections] == ["bad_control"]


def _restaurant_spec(over_sensitivity: str, sensitivity: int) -> Any:
    text = files_text("restaurant.toml")
    text = text.replace(
        "sensitivity = 5\n",
        f'sensitivity = {sensitivity}\nover_sensitivity = "{over_sensitivity}"\n',
    )
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
    setting=st.sampled_from([("reject", 5), ("reject", 7)]),  # combos need sensitivity >= 5, reject
)
def test_the_exact_combo_lookup_gives_what_the_item_by_item_check_gives(
    items: Any, setting: tuple[str, int]
) -> None:
    """The one-lookup path for orders that are exactly a combo (within the sensitivity) against the
    general check, on every kind of quantity JSON can carry (True == 1 and 1.0 == 1 in a set)."""
    from streamdp.engine.events import RejectedError
    from streamdp.kinds.items import ItemExtractor

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
