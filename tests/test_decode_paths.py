"""The fast decoder (orjson) gives exactly the reference decoder's answer (Python's json).

``decode`` takes orjson's result only where orjson reads the bytes as Python's reader does; every
other record goes to ``decode_with_stdlib``. Here both are run on the same bytes and must agree
on the value (compared by ``repr``, so an int read as a float differs), on the rejection reason
and on its message, for generated JSON, mutated records and the known disagreements of the two
libraries.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.engine import events
from streamdp.engine.events import FAST_MAX_BRACKETS, RejectedError, decode, decode_with_stdlib

TYPICAL = (
    b'{"event_id": "restaurant-1", "event_time": "2024-01-01T00:00:08.297904Z", '
    b'"source": "restaurant-orders", "items": {"cola": 2, "burger": 1}}'
)


def outcome(read: Any, record: bytes) -> tuple[str, str, str]:
    try:
        return ("accepted", repr(read(record)), "")
    except RejectedError as rejected:
        return ("rejected", rejected.reason, rejected.message)


def assert_same(record: bytes) -> None:
    assert outcome(decode, record) == outcome(decode_with_stdlib, record), record[:200]


# The cases where orjson alone and Python's json answer differently: each must be decided by
# the reference. The first assertion shows the disagreement is real (so the guard matters).
DISAGREEMENTS = [
    b'{"quantity": 18446744073709551616}',  # above 2^64 - 1: orjson reads a float
    b'{"quantity": -9223372036854775809}',  # below -2^63: orjson reads a float
    b'{"quantity": 123456789012345678901234567890}',
    b'{"event_time": 1e400}',  # Python: inf; orjson: refused
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": "\\ud800"}',  # lone surrogate escape: Python accepts it, the reference refuses it
    b'{"a": "\\udc00x"}',
    b'\xef\xbb\xbf{"a": 1}',  # byte-order mark
    b'{"a": "\xed\xa0\x80"}',  # a surrogate encoded in UTF-8
    b'{"a": ' + b"[" * 1020 + b"]" * 1020 + b"}",  # within orjson's limit, beyond Python's
    b'{"a": ' + b"[" * (FAST_MAX_BRACKETS + 100) + b"]" * (FAST_MAX_BRACKETS + 100) + b"}",
]


def _shown(value: Any) -> str:
    try:
        return repr(value)
    except RecursionError:
        return "a value too deep to show"


def _orjson_or_error(record: bytes) -> str:
    try:
        return _shown(orjson.loads(record))
    except orjson.JSONDecodeError:
        return "error"


def _json_or_error(record: bytes) -> str:
    try:
        return _shown(json.loads(record))
    except (ValueError, RecursionError):
        return "error"


@pytest.mark.parametrize("record", DISAGREEMENTS, ids=range(len(DISAGREEMENTS)))
def test_where_the_libraries_disagree_the_reference_decides(record: bytes) -> None:
    if record.startswith(b'{"a": [') and len(record) < 2 * 1020:
        # within orjson's limit and Python's: they agree; the guard sends it to the reference
        assert _orjson_or_error(record) == _json_or_error(record)
    else:
        assert _orjson_or_error(record) != _json_or_error(record)
    assert_same(record)


def test_the_fast_path_reads_a_typical_record(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def counting_loads(record: bytes) -> Any:
        calls.append(record)
        return orjson.loads(record)

    monkeypatch.setattr(events, "_orjson_loads", counting_loads)
    assert decode(TYPICAL) == json.loads(TYPICAL)
    assert decode(bytearray(TYPICAL)) == json.loads(TYPICAL)
    assert len(calls) == 2
    # text and mappings are read by the reference
    assert decode(TYPICAL.decode()) == json.loads(TYPICAL)
    assert len(calls) == 2


def test_without_orjson_the_reference_reads_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_orjson_loads", None)
    assert decode(TYPICAL) == json.loads(TYPICAL)
    for record in DISAGREEMENTS:
        assert_same(record)


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None), max_size=8),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, ascii_only=st.booleans(), wrap=st.booleans())
def test_generated_json_gets_the_same_answer(value: Any, ascii_only: bool, wrap: bool) -> None:
    if wrap:
        value = {"event_id": "e", "value": value}
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert_same(text.encode("utf-8", "surrogatepass"))


INTERESTING_BYTES = b'\\u"{}[]:,0123456789.eE+-dDnNaI \t\r\n\x00\x0c\xff\xed\xa0\x80\xc0'


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_records_get_the_same_answer(data: st.DataObject) -> None:
    record = bytearray(TYPICAL)
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        at = data.draw(st.integers(min_value=0, max_value=len(record)))
        action = data.draw(st.sampled_from(["insert", "replace", "delete", "digits"]))
        byte = data.draw(st.sampled_from(list(INTERESTING_BYTES)))
        if action == "insert":
            record[at:at] = bytes([byte])
        elif action == "replace" and at < len(record):
            record[at] = byte
        elif action == "delete" and at < len(record):
            del record[at]
        elif action == "digits":
            record[at:at] = b"9" * data.draw(st.integers(min_value=15, max_value=25))
    assert_same(bytes(record))
