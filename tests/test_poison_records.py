"""One bad record must never stop a worker (issue 16): each poison record found against a live
worker is, at the engine, a dead letter with a reason that fits any producer and whose key
encodes; the period clock is total; and the dead-letter size bound holds for any input.

Every test named after an issue case failed on the code before the fix (with the exception
named in its docstring)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Worker, collect, create_topics, make_scenario, produce
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import RECORD_OVERHEAD_BYTES, WRITE_BOUNDS, DaemonSettings
from streamdp.engine import REASONS, DeadLetterRecord, Engine, EngineSpec
from streamdp.engine.dead_letter_bounds import (
    MAX_DEAD_LETTER_BYTES,
    MAX_DEAD_LETTER_MESSAGE,
    MAX_DEAD_LETTER_RAW,
    MAX_LABEL_CHARS,
)
from streamdp.engine.events import MAX_QUANTITY, MAX_RECORD_BYTES, RejectedError, decode
from streamdp.engine.periods import (
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    PeriodClock,
    format_instant,
    parse_instant,
)
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.spec import PeriodSpec
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec

TOPIC = "restaurant-orders"
KAFKA_DEFAULT_REQUEST = 1_000_000
# a valid order of the restaurant example (a combo within the sensitivity, in its first periods)
GOOD = (
    '{"event_id": "o-1", "event_time": "2024-01-03T12:00:00Z", "source": "restaurant-orders", '
    '"items": {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1}}'
)


def _engine() -> Engine:
    return Engine(example_spec("restaurant"), sampler=InsecureSeededSampler(0))


def _consume(record: bytes, offset: int = 0) -> tuple[int, list[Any]]:
    """The daemon's per-record path on a fresh engine: (code, what it appended)."""
    out: list[Any] = []
    code = _engine().consume(record, TOPIC, 0, offset, out, False)
    return code, out


def _refused(record: bytes | str | dict[str, Any]) -> DeadLetterRecord:
    """The one dead letter the record gets, through ingest and (bytes) consume alike; checks
    it is published intact: valid ASCII JSON, an encodable key, within the size bound."""
    result = _engine().ingest(record, source_topic=TOPIC, partition=0, offset=7)
    assert not result.accepted
    assert len(result.dead_letters) == 1
    letter = result.dead_letters[0]
    if isinstance(record, bytes):
        _, out = _consume(record, offset=7)
        assert out == [letter]
    assert letter.reason in REASONS
    _assert_publishable(letter)
    return letter


def _assert_publishable(letter: DeadLetterRecord) -> None:
    text = letter.to_json()
    assert text.isascii()
    data = json.loads(text)
    json.dumps(data, allow_nan=False)
    assert data["key"] == letter.key
    letter.key.encode("utf-8")  # raises on a lone surrogate (the worker's crash)
    assert letter.encoded_size <= MAX_DEAD_LETTER_BYTES < KAFKA_DEFAULT_REQUEST


def _order(**fields: str) -> bytes:
    """GOOD with some fields replaced by raw JSON text."""
    data = json.loads(GOOD)
    body = {key: json.dumps(value) for key, value in data.items()}
    body.update(fields)
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in body.items()) + "}").encode()


def test_the_good_order_is_counted() -> None:
    # the fixture the other tests mutate is itself accepted, so each refusal is the mutation's
    code, out = _consume(GOOD.encode())
    assert code == 1
    assert out == []


# ------------------------------------------------------------------ issue 16, case by case


@pytest.mark.parametrize("where", ["quantity", "extra field", "event_time"])
def test_integer_of_5000_digits_is_a_dead_letter_not_a_crash(where: str) -> None:
    """Was: ValueError "Exceeds the limit (4300 digits)" out of events._scan_json_value."""
    digits = "9" * 5000
    record = {
        "quantity": _order(items='{"cola": ' + digits + "}"),
        "extra field": _order(note=digits),
        "event_time": _order(event_time=digits),
    }[where]
    letter = _refused(record)
    assert letter.reason == "malformed"
    assert "digits" in letter.message


@pytest.mark.parametrize(
    "record",
    [
        _order(event_id='"x\\ud800"'),  # escaped in the JSON text: how a producer sends it
        _order(event_id='"\\udc00abc"'),
        _order(items='{"cola\\udfff": 1}'),  # anywhere in the record, not only the id
    ],
)
def test_lone_surrogate_is_a_dead_letter_whose_key_encodes(record: bytes) -> None:
    """Was: UnicodeEncodeError('utf-8', 'restaurant-orders|o2|40|x\\ud800') encoding a key."""
    letter = _refused(record)
    assert letter.reason == "malformed"
    assert "surrogate" in letter.message


def test_lone_surrogate_in_text_or_mapping_records_is_refused() -> None:
    # the in-process forms of a record: a str holding the surrogate itself, and a mapping
    as_text = GOOD.replace('"o-1"', '"x\ud800"')
    assert _refused(as_text).reason == "malformed"
    as_mapping = json.loads(GOOD) | {"event_id": "x\ud800"}
    letter = _refused(as_mapping)
    assert letter.reason == "schema_violation"
    assert letter.event_id is not None
    assert letter.event_id.startswith("sha256:")


def test_a_valid_pair_of_surrogate_escapes_is_unicode_and_counted() -> None:
    # "\ud83d\ude00" is one emoji: the surrogate check must not refuse real text
    code, out = _consume(_order(event_id='"o-\\ud83d\\ude00"'))
    assert code == 1
    assert out == []


@pytest.mark.parametrize("size", [1_000_000, 2_400_000])
def test_record_of_megabytes_gets_a_dead_letter_that_fits_the_producer(size: int) -> None:
    """Was: its dead letter carried the whole record: MessageSizeTooLargeError, worker down."""
    head = GOOD[:-1] + ', "note": "'
    record = (head + "x" * (size - len(head) - 2) + '"}').encode()
    assert len(record) == size
    letter = _refused(record)
    assert letter.reason == "too_large"
    assert str(size) in letter.message
    assert letter.raw_truncated
    assert letter.raw_length == size
    assert letter.raw_sha256 == hashlib.sha256(record).hexdigest()
    assert record.decode().startswith(letter.raw)
    assert MAX_DEAD_LETTER_RAW - 12 < len(json.dumps(letter.raw)) - 2 <= MAX_DEAD_LETTER_RAW


def test_escapable_text_under_the_record_limit_fits_escaped() -> None:
    # 20,000 CJK characters (60 kB of UTF-8) as an unknown item's name: json's \\uXXXX
    # escapes make it 120 kB in a dead letter unless the budget is measured escaped
    name = "\u6c34" * 20_000
    record = _order(items=json.dumps({name: 1}, ensure_ascii=False))
    assert len(record) < MAX_RECORD_BYTES
    letter = _refused(record)
    assert letter.reason == "unknown_item"
    assert letter.raw_truncated
    assert len(json.dumps(letter.raw)) - 2 <= MAX_DEAD_LETTER_RAW
    assert len(json.dumps(letter.message)) - 2 <= MAX_DEAD_LETTER_MESSAGE


def test_undecodable_bytes_are_kept_as_base64_that_still_decodes() -> None:
    record = b"\xff\xfe" * 30_000  # not UTF-8, under the record limit
    letter = _refused(record)
    assert letter.reason == "malformed"
    assert letter.raw_encoding == "base64"
    assert letter.raw_truncated
    assert record.startswith(base64.b64decode(letter.raw, validate=True))
    assert letter.raw_length == len(record)


@pytest.mark.parametrize(
    "event_time",
    [
        '"9999-06-01T00:00:00Z"',
        '"9999-12-31T23:59:59-05:00"',
        '"0001-01-01T00:00:00+05:00"',
        '"0001-01-01T00:00:00Z"',
        "1e300",
        "-1e300",
        "-62135596800",  # year 1
        "253402300799",  # the last second of 9999
        "1" + "0" * 400,  # an integer beyond the float range
    ],
)
def test_timestamps_at_the_calendar_edges_are_bad_timestamps(event_time: str) -> None:
    """Was: OverflowError/ValueError from the period clock or from float()."""
    assert _refused(_order(event_time=event_time)).reason == "bad_timestamp"


def _replay(spec: EngineSpec, events: Path, out: Path) -> None:
    """The file replay, whichever of its signatures this tree has (the public ``as_of``)."""
    kwargs: dict[str, Any] = {"sampler": InsecureSeededSampler(0)}
    if "as_of" in inspect.signature(replay).parameters:
        kwargs["as_of"] = dt.datetime(2024, 2, 1, tzinfo=dt.UTC).timestamp()
    replay(spec, events, out, **kwargs)


def test_replay_of_an_event_in_year_9999_gives_a_dead_letter(tmp_path: Path) -> None:
    """Was: OverflowError "date value out of range" in the period clock, a traceback."""
    events = tmp_path / "events.jsonl"
    far = GOOD.replace("2024-01-03", "9999-01-03").replace("o-1", "o-far")
    events.write_text(GOOD + "\n" + far + "\n")
    _replay(example_spec("restaurant"), events, tmp_path / "out")
    letters = read_jsonl(tmp_path / "out" / "dead_letter.jsonl")
    assert [(d["reason"], d["event_id"]) for d in letters] == [("bad_timestamp", "o-far")]


# ------------------------------------------------------------------ the other hostile forms


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(constant: str) -> None:
    # Python's json reads them; a record holding one anywhere is refused, not counted
    letter = _refused(_order(note=constant))
    assert letter.reason == "malformed"
    assert constant in letter.message


def test_nesting_beyond_the_recursion_limit_is_malformed() -> None:
    assert _refused(b'{"note": ' + b"[" * 30_000 + b"]" * 30_000 + b"}").reason == "malformed"


def test_quantity_beyond_the_json_exact_range_is_invalid() -> None:
    letter = _refused(_order(items='{"cola": ' + str(MAX_QUANTITY + 1) + "}"))
    assert letter.reason == "invalid_quantity"


def test_huge_strings_and_keys_are_quoted_briefly() -> None:
    letter = _refused(_order(items=json.dumps({"k" * 50_000: 1})))
    assert letter.reason == "unknown_item"
    assert len(letter.message) < 300


def test_event_id_over_the_length_limit_is_shown_by_digest() -> None:
    event_id = "e" * 40_000
    letter = _refused(_order(event_id=json.dumps(event_id)))
    assert letter.reason == "schema_violation"
    digest = hashlib.sha256(event_id.encode()).hexdigest()
    assert letter.event_id == f"sha256:{digest}"
    assert letter.key.endswith(f"|sha256:{digest}")


def test_duplicate_keys_mean_one_thing_the_last() -> None:
    # RFC 8259 leaves duplicate names to the reader; here the last wins, as in json.loads:
    # an order whose first "items" is over the sensitivity but whose last is a combo is counted
    record = GOOD[:-1].replace('"items"', '"items": {"cola": 99}, "items"', 1) + "}"
    assert json.loads(record)["items"] == json.loads(GOOD)["items"]
    code, out = _consume(record.encode())
    assert code == 1
    assert out == []


def test_decode_refuses_oversized_text_by_its_utf8_size() -> None:
    text = '{"note": "' + "\u6c34" * (MAX_RECORD_BYTES // 3) + '"}'  # few chars, many bytes
    assert len(text) < MAX_RECORD_BYTES
    with pytest.raises(RejectedError) as refused:
        decode(text)
    assert refused.value.reason == "too_large"


# ------------------------------------------------------------------ the period clock is total

CLOCKS = [
    PeriodSpec(unit="day", start="2024-01-01", timezone="Pacific/Kiritimati"),
    PeriodSpec(unit="month", start="2024-01-01", timezone="America/New_York"),
    PeriodSpec(unit="fixed", start="2024-01-01T00:00:00+00:00", length_seconds=3600),
]


@settings(max_examples=300, deadline=None)
@given(
    ts=st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([EARLIEST_INSTANT, LATEST_INSTANT, -62135596800.0, 253402300799.0]),
    index=st.integers(min_value=-(10**30), max_value=10**30),
)
def test_period_clock_never_raises_for_any_float_or_index(ts: float, index: int) -> None:
    for spec in CLOCKS:
        clock = PeriodClock(spec)
        j = clock.index_of(ts)
        start, end = clock.bounds(j)
        assert math.isfinite(start)
        assert start < end
        clock.iso(ts)
        clock.iso(start)
        clock.bounds(index)
        if EARLIEST_INSTANT <= ts <= LATEST_INSTANT and j >= 0:
            assert start <= ts < end  # inside the supported range the clock is exact
    format_instant(ts)


@settings(max_examples=200, deadline=None)
@given(
    value=st.floats(allow_nan=True, allow_infinity=True)
    | st.integers()
    | st.text(max_size=40)
    | st.datetimes(timezones=st.timezones()).map(dt.datetime.isoformat)
)
def test_parse_instant_never_raises_and_stays_in_range(value: object) -> None:
    ts = parse_instant(value)
    assert ts is None or EARLIEST_INSTANT <= ts <= LATEST_INSTANT


# ------------------------------------------------------------------ the dead-letter bound

_ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
_HOSTILE_TEXT = st.text(_ANY_CHAR, max_size=40) | st.builds(
    lambda piece, times: piece * times,
    st.text(_ANY_CHAR, min_size=1, max_size=3),
    st.integers(min_value=0, max_value=120_000),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=_HOSTILE_TEXT,
    as_base64=st.booleans(),
    message=_HOSTILE_TEXT,
    labels=st.lists(st.none() | _HOSTILE_TEXT, min_size=4, max_size=4),
    offset=st.none() | st.integers(min_value=-(2**70), max_value=2**70),
    reason=st.sampled_from(REASONS),
)
def test_every_dead_letter_fits_its_bound_whatever_it_carries(
    raw: str,
    as_base64: bool,
    message: str,
    labels: list[str | None],
    offset: int | None,
    reason: Any,
) -> None:
    original = raw.encode("utf-8", "surrogatepass")
    text, encoding = (
        (base64.b64encode(original).decode(), "base64") if as_base64 else (raw, "utf-8")
    )
    letter = DeadLetterRecord(
        reason=reason,
        message=message,
        raw=text,
        raw_encoding=encoding,
        stream=labels[0],
        source=labels[1],
        topic=labels[2],
        event_id=labels[3],
        offset=offset,
    )
    _assert_publishable(letter)
    assert letter.raw_length == len(original)
    assert letter.raw_sha256 == hashlib.sha256(original).hexdigest()
    kept = base64.b64decode(letter.raw, validate=True) if as_base64 else letter.raw
    assert original.startswith(kept) if as_base64 else raw.startswith(kept)
    assert letter.raw_truncated == (kept != (original if as_base64 else raw))
    for label in (letter.stream, letter.source, letter.topic, letter.event_id):
        assert label is None or len(label) <= MAX_LABEL_CHARS


def test_the_worst_dead_letter_is_within_the_bound() -> None:
    # every field at its largest: astral characters cost 12 escaped bytes and 4 UTF-8 bytes
    astral = "\U0001f600"
    label = astral * MAX_LABEL_CHARS
    letter = DeadLetterRecord(
        reason="contribution_over_sensitivity",
        message=astral * 10_000,
        raw=astral * 100_000,
        stream=label,
        source=label,
        topic=label,
        event_id=label,
        offset=2**63 - 1,
    )
    assert letter.event_id == label  # kept as it is, so this is the largest case
    assert letter.encoded_size <= MAX_DEAD_LETTER_BYTES
    assert letter.encoded_size > 0.9 * MAX_DEAD_LETTER_BYTES  # the bound is not loose


def test_producer_request_limit_is_explicit_and_checked(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text("")
    settings_ = DaemonSettings(config=spec)
    assert settings_.max_request_size == KAFKA_DEFAULT_REQUEST
    settings_.validate()
    # every bounded write must fit: the largest bound names itself in the refusal
    largest = max(WRITE_BOUNDS, key=lambda kind: WRITE_BOUNDS[kind])
    too_small = WRITE_BOUNDS[largest] + RECORD_OVERHEAD_BYTES - 1
    with pytest.raises(ConfigError, match=rf"STREAMDP_MAX_REQUEST_SIZE.*{largest}"):
        DaemonSettings(config=spec, max_request_size=too_small).validate()
    assert WRITE_BOUNDS["dead letter"] == MAX_DEAD_LETTER_BYTES
    DaemonSettings(config=spec, max_request_size=too_small + 1).validate()


# ------------------------------------------------------------------ a live worker


def test_live_worker_dead_letters_the_issue_poison_records_and_stays_up(
    broker: Any, tmp_path: Path, unique_name: Any
) -> None:
    """The three records that took a live worker down (and into a restart loop): an integer of
    5,000 digits, a lone-surrogate event id and a record of about 1 MB. Each gets a dead letter
    with its reason; the worker stays ready and then stops cleanly."""
    suffix = unique_name("poison")
    scenario = make_scenario(periods=3, rate=2, suffix=suffix)
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    app_id = f"app-{suffix}"
    topics = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, 1, app_id=app_id, topics=topics)
    worker = Worker(
        broker,
        config,
        app_id=app_id,
        partitions=1,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "worker.log",
        namespace=topics.releases.rsplit(".", 1)[0],
        supervise=False,
        clock=scenario.clock,
    )
    try:
        worker.wait_ready()
        topic = f"orders-{suffix}"
        good = next(line.text for line in scenario.lines[topic] if line.expect is None)
        head = good[:-1] + ', "note": "'
        poison = [
            _order(items='{"cola": ' + "9" * 5000 + "}"),
            _order(event_id='"x\\ud800"'),
            (head + "x" * (1_000_000 - len(head) - 2) + '"}').encode(),
        ]
        key = b"restaurant-orders"
        produce(broker, [(topic, key, value) for value in [*poison, good.encode()]])

        def mine(seen: dict[str, dict[str, list[str]]]) -> dict[int, str]:
            letters = [json.loads(v) for vs in seen[topics.dead_letter].values() for v in vs]
            return {d["offset"]: d["reason"] for d in letters if d["topic"] == topic}

        seen = collect(broker, [topics.dead_letter], lambda s: len(mine(s)) >= 3, timeout=90)
        assert mine(seen) == {0: "malformed", 1: "malformed", 2: "too_large"}
        for values in seen[topics.dead_letter].values():
            assert all(len(v.encode()) <= MAX_DEAD_LETTER_BYTES for v in values)
        status = worker.status()
        assert status is not None
        assert status["ready"], worker.log_tail()
        assert worker.process.poll() is None
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail()


@pytest.mark.parametrize("kind", ["5", '"foo"', '"Event"', "null", '["event"]'])
def test_a_type_other_than_event_is_a_schema_violation(kind: str) -> None:
    """The event schemas say ``"type": {"const": "event"}``; an audit found records with
    ``"type": 5`` or ``"foo"`` counted. (``"control"`` has its own reason, control_on_input.)"""
    assert _refused(_order(type=kind)).reason == "schema_violation"
    assert _engine().ingest(_order(type='"event"'), source_topic=TOPIC).accepted
    assert _refused(_order(type='"control"')).reason == "control_on_input"
