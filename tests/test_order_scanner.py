"""The native order scanner against the Python path it stands in for.

The scanner (C, :mod:`streamdp.engine.scanned_orders`) may decline any record; what it answers
must be exactly what the Python path reads from the same bytes: the event time of
``parse_instant``, the content key of ``content_key`` (BLAKE2b, against hashlib), the item
quantities of ``decode``, and only for records ``decode`` reads as an order of the source.
The engine-level tests then hold an engine with the scanner and one without it equal, state,
outputs and statistics, on generated, mutated and hostile input; and check that the scanner
does take the ordinary records (else the tests above would pass on a scanner that declines
everything).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.engine import Engine, parse_spec
from streamdp.engine.events import MAX_ID_LENGTH, RejectedError, decode
from streamdp.engine.periods import EARLIEST_INSTANT, LATEST_INSTANT, parse_instant
from streamdp.engine.raw_records import content_key
from streamdp.engine.results import ACCEPTED
from streamdp.engine.scanned_orders import NATIVE_SCANNER_BUILT
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import example_spec, generate

if not NATIVE_SCANNER_BUILT:
    if os.environ.get("CI"):
        pytest.fail(
            "the native order scanner was not built (no C compiler at install?): CI must test it",
            pytrace=False,
        )
    pytest.skip(
        "NOT TESTED: the native order scanner is not built here (no C compiler at install); "
        "the engine reads every record on its Python path",
        allow_module_level=True,
    )

from streamdp.engine import _order_scanner  # type: ignore[attr-defined]

SOURCES = ("restaurant-orders", "orders-topic")
ITEMS = ("cola", "burger", "wings", "fries", "nuggets")


def _scanner() -> Any:
    return _order_scanner.OrderScanner(SOURCES, ITEMS, EARLIEST_INSTANT, LATEST_INSTANT)


def _reference(record: bytes) -> tuple[float, str, tuple[int, ...]] | None:
    """What the Python path reads from ``record`` when it is an order of the source with
    exactly the scanner's items, else None."""
    try:
        event = decode(record)
    except RejectedError:
        return None
    if not set(event) <= {"event_id", "event_time", "source", "items"}:
        return None
    event_id, items = event.get("event_id"), event.get("items")
    if type(event_id) is not str or not 0 < len(event_id) <= MAX_ID_LENGTH:
        return None
    if "source" in event and event["source"] not in SOURCES:
        return None
    ts = parse_instant(event.get("event_time"))
    if ts is None or type(items) is not dict or not set(items) <= set(ITEMS):
        return None
    if not all(type(q) is int and q >= 0 for q in items.values()):
        return None
    return ts, content_key(record), tuple(items.get(name, -1) for name in ITEMS)


def _agrees(record: bytes) -> bool:
    """The scanner declines ``record`` or answers what the Python path reads (asserted);
    returns whether it answered."""
    answer = _scanner().scan(record)
    if answer is None:
        return False
    assert answer == _reference(record), record
    return True


# ------------------------------------------------------------------ the content key


def test_the_content_key_is_blake2b_of_every_length() -> None:
    rng = random.Random(7)
    for n in [*range(400), 1023, 1024, 1025, 4096, 70_000]:
        data = bytes(rng.randrange(256) for _ in range(n))
        assert (
            _order_scanner.content_digest(data) == hashlib.blake2b(data, digest_size=16).hexdigest()
        ), n


# ------------------------------------------------------------------ event times

FRACTIONS = st.sampled_from(["", ".", ".5", ".12", ".123", ".1234", ".12345", ".123456"])
OFFSETS = st.sampled_from(
    ["Z", "z", "+00:00", "-00:00", "+01:00", "-05:30", "+23:59", "-23:59", "+24:00", "+0100",
     "+01", "", "+01:00:00", "+1:00"]
)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(
    year=st.integers(1890, 2210),
    month=st.integers(0, 13),
    day=st.integers(0, 32),
    hour=st.integers(0, 25),
    minute=st.integers(0, 61),
    second=st.integers(0, 61),
    fraction=FRACTIONS,
    offset=OFFSETS,
    separator=st.sampled_from(["T", "T", "T", " ", "t"]),
)
def test_event_times_read_as_parse_instant_reads_them(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    fraction: str,
    offset: str,
    separator: str,
) -> None:
    text = (
        f"{year:04d}-{month:02d}-{day:02d}{separator}{hour:02d}:{minute:02d}:{second:02d}"
        f"{fraction}{offset}"
    )
    record = json.dumps(
        {"event_id": "e", "event_time": text, "items": {"cola": 1}}, separators=(",", ":")
    ).encode()
    if _agrees(record):
        assert _scanner().scan(record)[0] == parse_instant(text)


def test_event_times_at_every_field_bound_read_as_parse_instant_reads_them() -> None:
    """Each field of a canonical time at and beyond its bounds, the others ordinary: what
    Python refuses (second 60, 30 February, hour 24, ...) the scanner must decline."""
    fields = {
        "year": (["1899", "1900", "2199", "2200"], "2024"),
        "month": (["00", "01", "12", "13"], "02"),
        "day": (["00", "01", "28", "29", "30", "31", "32"], "28"),
        "hour": (["00", "23", "24"], "10"),
        "minute": (["00", "59", "60"], "30"),
        "second": (["00", "59", "60", "61"], "15"),
        "offset": (["+23:59", "+24:00", "-23:59", "-24:00", "+00:60", "+99:00"], "Z"),
    }
    answered = 0
    for field, (values, _) in fields.items():
        for value in values:
            for year in ("2023", "2024", "2100", "2000"):  # not leap, leap, not, leap
                parts = {name: ordinary for name, (_, ordinary) in fields.items()}
                parts["year"] = year
                parts[field] = value
                text = (
                    f"{parts['year']}-{parts['month']}-{parts['day']}T{parts['hour']}:"
                    f"{parts['minute']}:{parts['second']}{parts['offset']}"
                )
                record = json.dumps({"event_id": "e", "event_time": text, "items": {"cola": 1}})
                answered += _agrees(record.encode())
                if parse_instant(text) is None:
                    assert _scanner().scan(record.encode()) is None, text
    assert answered > 40


def test_ordinary_event_times_are_taken() -> None:
    """Power for the test above: valid times in every accepted form are answered."""
    rng = random.Random(3)
    for _ in range(2000):
        instant = dt.datetime(1900, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
            microseconds=rng.randrange(300 * 365 * 86400 * 10**6)
        )
        shift = dt.timedelta(minutes=rng.randrange(-23 * 60, 23 * 60))
        local = instant.astimezone(dt.timezone(shift))
        if not 1900 <= local.year <= 2199:
            continue
        text = local.isoformat(timespec=rng.choice(["seconds", "milliseconds", "microseconds"]))
        if rng.random() < 0.3 and shift == dt.timedelta(0):
            text = text.replace("+00:00", "Z")
        record = json.dumps({"event_id": "e", "event_time": text, "items": {"cola": 1}}).encode()
        assert _agrees(record), text


# ------------------------------------------------------------------ whole records

KEYS = st.sampled_from(["event_id", "event_time", "source", "items", "type", "extra", "event_id"])
STRINGS = st.one_of(
    st.sampled_from(["e-1", "", "x" * 200, "x" * 201, "restaurant-orders", "orders-topic",
                     "other", "2024-03-01T10:00:00Z", "2024-03-01T10:00:00.25+02:00",
                     "2024-02-30T10:00:00Z", "caf\u00e9", "a\\u0041", "tab\there", "\u007f"]),
    st.text(max_size=12),
)  # fmt: skip
QUANTITY_TEXT = st.sampled_from(
    ["0", "1", "2", "15", "007", "-1", "1.0", "1e0", "2E1", "true", "null", '"1"',
     "999999999999999", "1000000000000000", "9007199254740991", "[1]"]
)  # fmt: skip
ITEM_KEYS = st.sampled_from([*ITEMS, "pizza", "Cola", "cola"])
SPACE = st.sampled_from(["", "", " ", "\n", "\t", "\r\n ", "\u00a0", "\x0b"])


@st.composite
def order_texts(draw: st.DrawFn) -> bytes:
    """Order-like records written by hand: any key order, duplicate and unknown keys, odd
    whitespace, numbers and strings the scanner must decline or read right."""

    def string(value: str) -> str:
        return '"' + value + '"' if draw(st.booleans()) else json.dumps(value)

    members = []
    for key in draw(st.lists(KEYS, min_size=0, max_size=6)):
        if key == "items":
            entries = [
                f"{draw(SPACE)}{string(name)}{draw(SPACE)}:{draw(SPACE)}{draw(QUANTITY_TEXT)}"
                for name in draw(st.lists(ITEM_KEYS, max_size=6))
            ]
            value = "{" + ",".join(entries) + draw(SPACE) + "}"
        elif key == "source" and draw(st.booleans()):
            value = draw(st.sampled_from(["null", '"restaurant-orders"', '"orders-topic"', "1"]))
        else:
            value = string(draw(STRINGS))
        members.append(f"{draw(SPACE)}{string(key)}{draw(SPACE)}:{draw(SPACE)}{value}")
    text = draw(SPACE) + "{" + ",".join(members) + draw(SPACE) + "}" + draw(SPACE)
    return text.encode("utf-8", "surrogatepass")


def _ordinary(rng: random.Random) -> dict[str, Any]:
    combos = [
        {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1},
        {"burger": 2, "wings": 2, "fries": 1},
        {"cola": 0, "fries": 3},
    ]
    combo = rng.choice(combos)
    record: dict[str, Any] = {
        "event_id": f"e-{rng.randrange(10**6)}",
        "event_time": f"2024-0{rng.randrange(1, 10)}-1{rng.randrange(10)}T0{rng.randrange(10)}"
        f":1{rng.randrange(10)}:2{rng.randrange(10)}.{rng.randrange(10**6):06d}Z",
        "items": combo,
    }
    if rng.random() < 0.5:
        record["source"] = rng.choice(SOURCES)
    return record


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=order_texts())
def test_hand_written_records_are_declined_or_read_as_the_python_path_reads_them(
    record: bytes,
) -> None:
    _agrees(record)


@settings(max_examples=1500, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    edits=st.lists(
        st.tuples(st.sampled_from(["flip", "insert", "delete", "cut"]), st.integers(0, 10**6),
                  st.sampled_from(b' \t\n"\\{}[],:0123456789-+.eEZTz\x00\x7f\x80\xc3\xa9')),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_mutated_ordinary_records_are_declined_or_read_as_the_python_path_reads_them(
    seed: int, edits: list[tuple[str, int, int]]
) -> None:
    data = bytearray(json.dumps(_ordinary(random.Random(seed))).encode())
    for edit, where, byte in edits:
        at = where % (len(data) + 1)
        if edit == "flip" and at < len(data):
            data[at] = byte
        elif edit == "insert":
            data.insert(at, byte)
        elif edit == "delete" and at < len(data):
            del data[at]
        elif edit == "cut":
            del data[at:]
    _agrees(bytes(data))


def test_the_scanner_takes_ordinary_records_in_every_layout() -> None:
    """Power for the record tests above: ordinary orders, compact or spaced, any key order."""
    rng = random.Random(11)
    taken = 0
    for _ in range(3000):
        record = _ordinary(rng)
        keys = list(record)
        rng.shuffle(keys)
        shuffled = {key: record[key] for key in keys}
        text = json.dumps(shuffled, separators=rng.choice([(",", ":"), (", ", ": ")]))
        taken += _agrees(text.encode())
    assert taken == 3000
    for line in generate("restaurant", 5, 200, seed=1):
        assert _agrees(line.text.encode()), line.text


def test_the_scanner_declines_what_only_the_python_path_may_judge() -> None:
    scanner = _scanner()
    base = {"event_id": "e", "event_time": "2024-03-01T10:00:00Z", "items": {"cola": 1}}
    assert scanner.scan(json.dumps(base).encode()) is not None
    declined = [
        {**base, "type": "control"},  # a control record on an input topic: refused there
        {**base, "source": "other"},  # another source: unknown_source
        {**base, "source": None},
        {**base, "event_id": "caf\u00e9"},  # non-ASCII (json.dumps escapes it)
        {**base, "items": {"cola": 0}},  # all zero: not a combo / an empty contribution
        {**base, "items": {}},
        {**base, "items": {"pizza": 1}},
        {**base, "items": {"cola": True}},
        {**base, "items": {"cola": 1.0}},
        {**base, "event_time": 1709287200},  # seconds since the epoch: the Python path reads it
        {**base, "event_time": "2024-03-01T10:00:00"},  # naive
        {**base, "event_id": "x" * 201},
        {"event_id": "e", "event_time": "2024-03-01T10:00:00Z"},
    ]
    for record in declined:
        assert scanner.scan(json.dumps(record).encode()) is None, record
    head = b'{"event_id":"e","event_time":"2024-03-01T10:00:00Z",'
    texts = [
        b'{"event_id":"f",' + head[1:] + b'"items":{"cola":1}}',  # duplicate key: last wins
        head + b'"items":{"cola":1,"cola":2}}',
        head + b'"items":{"cola":1}} x',
        head + b'"items":{"cola":01}}',  # a leading zero: not JSON
        head + b'"items":{"cola":1}}\x00',
        bytearray(head + b'"items":{"cola":1}}'),  # bytes only
    ]
    assert scanner.scan(head + b'"items":{"cola":1}}') is not None
    for text in texts:
        assert scanner.scan(text) is None, text
    assert scanner.scan(b" " * 4096 + json.dumps(base).encode()) is None  # over 4096 bytes


# ------------------------------------------------------------------ the engine

TWO_STREAMS = """
[sources.shop]
topic = "shop-orders"
kind = "order"
epsilon_cap = 2.0

[streams.all-items]
source = "shop"
epsilon = 1.0
sensitivity = 4
horizon = 64
allowed_lateness = "1h"
max_future_periods = 3
period = { unit = "day", start = "2024-01-01" }
counters = { kind = "items", items = ["cola", "burger", "fries"] }

[streams.drinks]
source = "shop"
epsilon = 1.0
sensitivity = 2
over_sensitivity = "clip"
horizon = 64
allowed_lateness = "1h"
period = { unit = "day", start = "2024-01-01" }
counters = { kind = "items", items = ["cola"] }
"""


def _shop_records(seed: int, n: int) -> list[bytes]:
    """Orders for TWO_STREAMS: mostly ordinary, with items only one stream knows (zero or
    not), over-sensitivity orders, late, future and duplicate records, and hostile bytes."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for i in range(n):
        day = 1 + i * 6 // n + rng.choice([0, 0, 0, -2, 4])
        items = rng.choice([{"cola": 1}, {"cola": 2, "burger": 1}, {"burger": 1, "fries": 1},
                            {"cola": 0, "burger": 2}, {"burger": 2}, {"cola": 3, "fries": 1},
                            {"cola": 5}, {"fries": 0}])  # fmt: skip
        record: dict[str, Any] = {
            "event_id": f"o-{rng.randrange(n)}",
            "event_time": f"2024-01-{max(1, day):02d}T{rng.randrange(24):02d}:00:00Z",
            "items": items,
        }
        if rng.random() < 0.3:
            record["source"] = rng.choice(["shop", "shop-orders", "elsewhere"])
        text = json.dumps(record).encode()
        roll = rng.random()
        if roll < 0.05 and out:
            text = rng.choice(out)  # a producer's retry
        elif roll < 0.08:
            text = text.replace(b"}", b"", 1)
        elif roll < 0.1:
            text = b'{"type": "control", "action": "close", "stream": "drinks", "through": 2e9}'
        out.append(text)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_engine_with_the_scanner_equals_one_without_it(seed: int) -> None:
    spec = parse_spec(TWO_STREAMS)
    native = Engine(spec, sampler=InsecureSeededSampler(9), record_outputs=True)
    python = Engine(spec, sampler=InsecureSeededSampler(9), record_outputs=True, native_scan=False)
    assert native._scanned
    assert not python._scanned
    records = _shop_records(seed, 3000)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()
    scanned = 0
    scanner = native._scanned["shop-orders"]
    for offset, record in enumerate(records):
        now = start + offset * 7 * 86400 / len(records)
        got: list[Any] = [*native.advance_clock(now)]
        want: list[Any] = [*python.advance_clock(now)]
        scanned += scanner.scan(record) is not None
        code = native.consume(record, "shop-orders", 0, offset, got)
        assert code == python.consume(record, "shop-orders", 0, offset, want)
        assert [o.to_json() for o in got] == [o.to_json() for o in want], record
    assert native.snapshot() == python.snapshot()
    assert native.stats == python.stats
    assert native.take_changes() == python.take_changes()
    assert scanned > len(records) // 2  # the fast path did the bulk of the work
    assert python.stats.rejected_by_reason["duplicate_event"] > 0
    assert python.stats.rejected_by_reason["late"] > 0


def test_the_restaurant_scenario_is_counted_by_the_scanner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every ordinary order of the example is counted without the Python decoder."""
    spec = example_spec("restaurant")
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    topic = next(iter(spec.sources.values())).topic
    engine.advance_clock(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp())
    lines = [line.text.encode() for line in generate("restaurant", 2, 300, seed=4)]

    def no_python_decoding(record: Any) -> Any:
        raise AssertionError(f"the Python path read {record!r}")

    monkeypatch.setattr("streamdp.engine.intake.decode", no_python_decoding)
    out: list[Any] = []
    assert {engine.consume(line, topic, 0, i, out) for i, line in enumerate(lines)} == {ACCEPTED}
    assert engine.stats.events_accepted == len(lines)
