"""Fuzz tier (issue 16): any input bytes, through the daemon's per-record path
(``Engine.consume``) and the general one (``Engine.ingest``), end as exactly one of counted,
dead-lettered with a reason, or (on the control path) an applied operator action; no exception
escapes; every dead letter and every release is valid JSON (no NaN), within its size bound, with
a key that encodes to UTF-8.

Bounded (a few hundred examples per strategy) so that it runs in the normal suite in seconds.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.engine import REASONS, DeadLetterRecord, Engine, EngineSpec
from streamdp.engine.dead_letter_bounds import MAX_DEAD_LETTER_BYTES
from streamdp.engine.results import ACCEPTED, NOT_COUNTED
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate

SPECS: dict[str, EngineSpec] = {name: example_spec(name) for name in ("restaurant", "hospital")}
# the public clock while the records arrive, and after (a few more days then close)
ARRIVAL = dt.datetime(2024, 1, 1, 6, tzinfo=dt.UTC).timestamp()
LATER = dt.datetime(2024, 1, 5, tzinfo=dt.UTC).timestamp()
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------------------------ the engine's API, in one place


def _advance(engine: Engine, now: float) -> list[Any]:
    """Move the engine's clock to ``now``; the releases that closes (the one line to adapt
    if the engine's clock API changes)."""
    if hasattr(engine, "advance_clock"):
        return list(engine.advance_clock(now))
    return list(engine.advance_watermark(now))  # the event-time engine before the clock


def _engines(spec: EngineSpec) -> tuple[Engine, Engine]:
    pair = (
        Engine(spec, sampler=InsecureSeededSampler(1)),
        Engine(spec, sampler=InsecureSeededSampler(1)),
    )
    for engine in pair:
        _advance(engine, ARRIVAL)
    return pair


# ------------------------------------------------------------------ checks


def _assert_publishable(record: Any) -> None:
    text = record.to_json()
    data = json.loads(text)
    json.dumps(data, allow_nan=False)  # no NaN/Infinity reached an output
    assert data["key"] == record.key
    size = len(record.key.encode("utf-8")) + len(text.encode("utf-8"))
    if isinstance(record, DeadLetterRecord):
        assert record.reason in REASONS
        assert size <= MAX_DEAD_LETTER_BYTES


def _run(spec: EngineSpec, records: list[bytes]) -> None:
    """Every record through consume (one engine) and ingest (another): same outcome, and it is
    exactly one of counted or dead-lettered with a reason; then close everything."""
    fast, general = _engines(spec)
    topic = next(iter(spec.sources.values())).topic
    for offset, record in enumerate(records):
        out: list[Any] = []
        code = fast.consume(record, topic, 0, offset, out)
        controls = general.stats.controls  # an engine that obeys control records on input
        result = general.ingest(record, source_topic=topic, partition=0, offset=offset)
        letters = list(result.dead_letters)
        if result.accepted:
            assert code == ACCEPTED
            # counted by some stream; any other stream's refusal is a dead letter with a reason
            assert len(letters) == len(result.rejections) < len(spec.streams) + 1
        else:
            assert code == NOT_COUNTED
            applied = general.stats.controls == controls + 1
            assert bool(letters) != applied, "a record neither counted nor dead-lettered"
        assert [d for d in out if isinstance(d, DeadLetterRecord)] == letters
        for record_out in [*out, *result.outputs]:
            _assert_publishable(record_out)
        if hasattr(general, "control"):  # the operator path: applied or dead-lettered
            applied = general.stats.controls
            control = general.control(record)
            assert (general.stats.controls == applied + 1) != bool(control.dead_letters)
            for record_out in [*control.outputs, *control.dead_letters]:
                _assert_publishable(record_out)
    assert fast.stats.to_dict()["events_accepted"] == general.stats.events_accepted
    for engine in (fast, general):
        for record_out in _advance(engine, LATER):
            _assert_publishable(record_out)


# ------------------------------------------------------------------ strategies


def _good_lines(scenario: str) -> list[bytes]:
    spec = SPECS[scenario]
    return [line.text.encode() for line in generate(scenario, 2, 4, seed=3, spec=spec)]


GOOD = {name: _good_lines(name) for name in SPECS}
_ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates included
_TEXT = st.text(_ANY_CHAR, max_size=12) | st.builds(
    lambda piece, times: piece * times,
    st.text(_ANY_CHAR, min_size=1, max_size=2),
    st.integers(0, 3_000) | st.just(40_000),  # the large one may pass the record limit
)
_STRING = _TEXT.map(json.dumps)  # ASCII JSON text; surrogates become \udXXX escapes
_NUMBER = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.integers(4000, 6000).map(lambda n: "9" * n),  # over Python's 4300-digit limit or not
    st.floats(allow_nan=True, allow_infinity=True).map(json.dumps),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-0", "2e-400", "9007199254740993"]),
)
_INSTANT = st.one_of(
    st.datetimes(min_value=dt.datetime(2023, 12, 25), max_value=dt.datetime(2024, 2, 5)).map(
        lambda t: json.dumps(t.isoformat() + "Z")
    ),
    st.datetimes(timezones=st.timezones()).map(lambda t: json.dumps(t.isoformat())),
    st.sampled_from(
        [
            '"0001-01-01T00:00:00+05:00"',
            '"9999-12-31T23:59:59-05:00"',
            '"2024-01-03T12:00:00"',
            "1e300",
            "-62135596800",
            "253402300799",
            "1704283200",
            "1704283200.5",
        ]
    ),
    _NUMBER,
    _STRING,
)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


_VALUE = st.recursive(
    st.one_of(
        _STRING,
        _NUMBER,
        st.sampled_from(["true", "false", "null"]),
        (st.integers(0, 1_500) | st.just(20_000)).map(_nested),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(_STRING, inner), max_size=4).map(
            lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"
        ),
    ),
    max_leaves=8,
)


def _names(scenario: str) -> st.SearchStrategy[str]:
    spec = SPECS[scenario]
    names: list[str] = []
    for stream in spec.streams.values():
        names += list(stream.counters.items)
        names += [a.name for a in stream.counters.attributes]
        names += [c for a in stream.counters.attributes for c in a.categories]
        if stream.counters.flag_field:
            names.append(stream.counters.flag_field)
    return st.sampled_from(sorted(set(names))).map(json.dumps) | _STRING


def _members(scenario: str) -> st.SearchStrategy[str]:
    """A JSON object's members: the event fields with hostile values, extra keys, duplicates."""
    spec = SPECS[scenario]
    source = next(iter(spec.sources.values()))
    names = _names(scenario)
    counters = st.lists(
        st.tuples(names, _NUMBER | names | st.sampled_from(["true", "false"])), max_size=6
    ).map(lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}")
    field = st.one_of(
        st.tuples(st.just('"event_id"'), _STRING | _VALUE),
        st.tuples(st.just('"event_time"'), _INSTANT),
        st.tuples(st.just('"source"'), st.sampled_from([json.dumps(source.name), '"nope"'])),
        st.tuples(st.sampled_from(['"items"', '"attributes"']), counters | _VALUE),
        st.tuples(st.just('"type"'), st.sampled_from(['"control"', '"event"'])),
        st.tuples(st.just('"action"'), st.sampled_from(['"close"', '"watermark"'])),
        st.tuples(st.sampled_from(['"stream"', '"through"', '"time"']), _INSTANT | names),
        st.tuples(_STRING, _VALUE),
    )
    return st.lists(field, min_size=0, max_size=8).map(
        lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"
    )


def _mutated(scenario: str) -> st.SearchStrategy[bytes]:
    """A good record with bytes overwritten, inserted or cut (invalid UTF-8 and JSON)."""

    def mutate(base: bytes, at: float, junk: bytes, cut: bool) -> bytes:
        i = int(at * len(base))
        return base[:i] + junk + (b"" if cut else base[i:])

    return st.builds(
        mutate,
        st.sampled_from(GOOD[scenario]),
        st.floats(0, 1),
        st.binary(max_size=8),
        st.booleans(),
    )


def _records(scenario: str) -> st.SearchStrategy[list[bytes]]:
    one = st.one_of(
        st.binary(max_size=200),
        _mutated(scenario),
        _members(scenario).map(lambda text: text.encode()),
        st.sampled_from(GOOD[scenario]),
    )
    return st.lists(one, min_size=1, max_size=12)


# ------------------------------------------------------------------ the tests


@FUZZ
@given(records=st.lists(st.binary(max_size=300), min_size=1, max_size=10))
def test_arbitrary_bytes_are_counted_or_dead_lettered(records: list[bytes]) -> None:
    _run(SPECS["restaurant"], records)


@FUZZ
@given(records=_records("restaurant"))
def test_hostile_orders_are_counted_or_dead_lettered(records: list[bytes]) -> None:
    _run(SPECS["restaurant"], records)


@FUZZ
@given(records=_records("hospital"))
def test_hostile_person_records_are_counted_or_dead_lettered(records: list[bytes]) -> None:
    _run(SPECS["hospital"], records)


def test_the_good_records_are_counted() -> None:
    # the strategies' good records really are good, so "counted" is reachable in the fuzz
    for scenario, lines in GOOD.items():
        spec = SPECS[scenario]
        engine, _ = _engines(spec)
        topic = next(iter(spec.sources.values())).topic
        codes = [engine.consume(line, topic, 0, i, []) for i, line in enumerate(lines)]
        assert codes.count(ACCEPTED) >= len(lines) // 2, scenario
