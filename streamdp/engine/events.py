"""Input records: decoding, envelope checks and per-stream counter contributions.

Hand-written validation (no jsonschema at runtime): the daemon targets >= 50,000 events/s per
worker, so per-event work is a dict lookup per field and O(counters touched). The JSON Schemas
in ``schemas/`` describe the same rules for producers; tests check the two agree on examples.

Record kinds (see ``schemas/``):

- order event: ``{"event_id", "event_time", "source"?, "items": {item: quantity}}``
- person event: ``{"event_id", "event_time", "source"?, "attributes": {name: category|bool}}``
- control record: ``{"type": "control", "action": "close", "stream", "through"}`` (close every
  period of the stream that ends at or before ``through``, ignoring lateness; never beyond the
  worker's public clock). Read from the control topic only.

How a kind's event becomes counter increments is the kind's :class:`Extractor`, in its module
of :mod:`streamdp.kinds`.

``event_time`` and instants are RFC 3339 text with a UTC offset, or seconds since the epoch.
Rejection messages name fields and allowed values, never counts.

Any bytes at all either decode to an event or raise :class:`RejectedError` with a reason, never
another exception (a fuzz test checks): records over :data:`MAX_RECORD_BYTES` are refused unread
("too_large"); text that is not UTF-8, not one JSON object, nested beyond Python's recursion
limit, holding ``NaN``/``Infinity`` (not JSON), an integer of more than 4300 digits (Python's
conversion limit) or a lone UTF-16 surrogate escape (``"\\ud800"``: no Unicode text) is
"malformed". Duplicate object keys are not refused: the last one wins (as in Python and
JavaScript), so a record always means one thing here. Quantities are at most
:data:`MAX_QUANTITY`.

Two decoders, one answer. :func:`decode_with_stdlib` is the reference: Python's own JSON reader
plus the checks above. :func:`decode` first tries orjson (about five times faster on a typical
record) on bytes it can read exactly as the reference does, and takes its result only when
orjson accepted the record and it is an object; on anything else (an orjson error of any kind,
a record nested deeper than :data:`FAST_MAX_BRACKETS` brackets, a run of 19 digits, which
orjson may read as a float where Python reads an integer, text input, or orjson missing) the
reference decides. orjson refuses every lone surrogate, invalid UTF-8, ``NaN``/``Infinity`` and
a byte-order mark, so what it accepts the reference accepts with the same value; a property
test holds the two equal on generated and mutated records, rejections included.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, get_args

from streamdp.engine.spec import StreamSpec

_orjson_loads: Callable[[bytes | bytearray], Any] | None
try:
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - orjson is a dependency; the reference path suffices
    _orjson_loads = None

Reason = Literal[
    "malformed",
    "schema_violation",
    "bad_timestamp",
    "unknown_source",
    "unknown_stream",
    "unknown_item",
    "invalid_quantity",
    "unknown_category",
    "contribution_over_sensitivity",
    "not_a_combo",
    "duplicate_event",
    "late",
    "before_start",
    "after_horizon",
    "too_far_in_future",
    "bad_control",
    "wrong_partition_key",
    "control_on_input",
    "too_large",
]
REASONS: Final[tuple[str, ...]] = get_args(Reason)

MAX_ID_LENGTH = 200
#: Largest input record read (bytes; UTF-8 for text). An order or person record is well under
#: 2 KiB even with a 200-character id; anything larger is refused unread as "too_large".
MAX_RECORD_BYTES: Final = 65_536
#: Largest quantity of an item (2^53 - 1: the largest integer every JSON reader holds exactly).
MAX_QUANTITY: Final = 2**53 - 1
#: Longest piece of input text quoted in a rejection message (characters, before escaping).
MAX_QUOTED = 64

# A contribution: (counter index, amount) pairs in counter order (read only: may be shared).
Contribution = Sequence[tuple[int, int]]


class RejectedError(Exception):
    """Internal signal: the record is rejected for ``reason`` (never escapes the engine)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


class UnitBoundDrop(Exception):  # noqa: N818 - a signal, not an error: the record is fine
    """Internal signal: the record is beyond its privacy unit's bounds and is dropped, counted
    in protected metrics only (a dead letter would copy it to another surface; nothing about
    it is wrong)."""


class _NonFiniteConstantError(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a record (Python's json accepts them; JSON not)."""


def _refuse_constant(name: str) -> Any:
    raise _NonFiniteConstantError(name)


# strict JSON: NaN/Infinity refused (the hook runs only when one is met: no cost otherwise)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
# the C scanner behind json.loads: (value, end) of the JSON value starting at an index
_scan_json_value: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def quoted(value: object) -> str:
    """``repr`` of a piece of input for a message: at most :data:`MAX_QUOTED` characters of it
    (longer text is cut and marked with "..."); lone surrogates are escaped by ``repr``."""
    if isinstance(value, str) and len(value) > MAX_QUOTED:
        return repr(value[:MAX_QUOTED]) + "..."
    text = repr(value)
    return text if len(text) <= MAX_QUOTED + 2 else text[: MAX_QUOTED + 2] + "..."


def is_unicode_text(text: str) -> bool:
    """True unless ``text`` holds a lone UTF-16 surrogate (then it has no UTF-8 encoding)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_unicode(data: object) -> bool:
    """True when every string (key or value) inside decoded JSON is Unicode text (iterative:
    the nesting depth is whatever the decoder accepted)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not is_unicode_text(item):
                return False
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def record_size(record: bytes | bytearray | str) -> int:
    """Size of a raw record in bytes (text: its UTF-8 encoding, lone surrogates as 3 bytes)."""
    if isinstance(record, str):
        return len(record.encode("utf-8", "surrogatepass"))
    return len(record)


#: A record with more opening brackets than this goes to the reference decoder: orjson nests up
#: to 1024 levels, Python's reader to about its recursion limit, so deep records are read by
#: the one whose limit defines "too deeply". (A shorter record cannot hold more: not counted.)
FAST_MAX_BRACKETS: Final = 512
# 19 digits in a row (found as a run of zeros once every digit is mapped to one): an integer
# orjson may read as a float, outside -2^63..2^64-1. A translate and a substring search cost a
# tenth of a regular expression's search here.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGIT_RUN = b"0" * 19


def too_large_message(size: int) -> str:
    """The dead letter's message for a record of ``size`` bytes over :data:`MAX_RECORD_BYTES`."""
    return (
        f"record is {size} bytes; records larger than {MAX_RECORD_BYTES} bytes are refused unread"
    )


def decode(record: bytes | bytearray | str | Mapping[str, Any]) -> dict[str, Any]:
    """The record as a dict; raises :class:`RejectedError` ("too_large" over
    :data:`MAX_RECORD_BYTES`, else "malformed") unless it is one strict JSON object of Unicode
    text. Never raises anything else, whatever the bytes. The same answer as
    :func:`decode_with_stdlib`, faster on bytes (module docstring)."""
    if (
        (type(record) is bytes or type(record) is bytearray)
        and _orjson_loads is not None
        and len(record) <= MAX_RECORD_BYTES
        and (
            len(record) <= FAST_MAX_BRACKETS
            or record.count(b"[") + record.count(b"{") <= FAST_MAX_BRACKETS
        )
        and _LONG_DIGIT_RUN not in record.translate(_DIGITS_AS_ZERO)
    ):
        try:
            data = _orjson_loads(record)
        except Exception:  # noqa: S110 - any refusal: the reference decides and says why
            pass
        else:
            if type(data) is dict:
                return data
    return decode_with_stdlib(record)


def decode_with_stdlib(record: bytes | bytearray | str | Mapping[str, Any]) -> dict[str, Any]:
    """:func:`decode` by Python's own JSON reader: the reference, and the reader of every record
    the fast path passes on (rejections included)."""
    if not isinstance(record, bytes | bytearray | str):
        return dict(record)
    # a str has at least as many UTF-8 bytes as characters: measure only when it may be over
    if len(record) > MAX_RECORD_BYTES or (
        isinstance(record, str) and 4 * len(record) > MAX_RECORD_BYTES
    ):
        size = record_size(record)
        if size > MAX_RECORD_BYTES:
            raise RejectedError("too_large", too_large_message(size))
    try:
        # UTF-8 is the only encoding we accept; decoding first skips json's encoding sniffing
        if isinstance(record, str):
            text = record
            if not is_unicode_text(text):
                raise UnicodeEncodeError("utf-8", text, 0, 1, "lone surrogate")
        else:
            text = record.decode("utf-8")
        # json.loads without its two whitespace regex matches and Python frames (a third of
        # its cost on a typical event); anything but one value filling the text exactly goes
        # through the full decoder, so what is accepted and refused is the same
        try:
            data, end = _scan_json_value(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            data = _DECODER.decode(text)
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise RejectedError("malformed", "record is not UTF-8 text") from None
    except json.JSONDecodeError:
        raise RejectedError("malformed", "record is not one JSON value") from None
    except RecursionError:
        raise RejectedError("malformed", "record nests arrays/objects too deeply") from None
    except _NonFiniteConstantError as constant:
        raise RejectedError(
            "malformed", f"record holds {constant}, which is not a JSON number"
        ) from None
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise RejectedError(
            "malformed", "record holds an integer with too many digits to convert"
        ) from None
    if not isinstance(data, dict):
        raise RejectedError("malformed", "record is JSON but not an object")
    # an escaped lone surrogate ("\\ud800") decodes to text no UTF-8 output can carry; only
    # a record with a \\u escape can hold one, so others skip the walk
    if "\\u" in text and not _all_unicode(data):
        raise RejectedError(
            "malformed",
            "record holds a lone UTF-16 surrogate escape (\\ud800-\\udfff not in a pair); "
            "strings must be Unicode text",
        )
    return data


def event_id_of(event: Mapping[str, Any]) -> str:
    """The ``event_id``: non-empty Unicode text of at most :data:`MAX_ID_LENGTH` characters."""
    value = event.get("event_id")
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_ID_LENGTH
        or not is_unicode_text(value)
    ):
        raise RejectedError(
            "schema_violation",
            f"field 'event_id' must be a non-empty string of at most {MAX_ID_LENGTH} characters "
            "of Unicode text (no lone surrogates)",
        )
    return value


class Extractor:
    """Turns a decoded event into one stream's counter increments."""

    def contribution(self, event: Mapping[str, Any]) -> Contribution:  # pragma: no cover
        raise NotImplementedError


def extractor_for(spec: StreamSpec) -> Extractor:
    """The extractor of the stream's kind (:mod:`streamdp.kinds`)."""
    from streamdp.kinds import stream_kind

    return stream_kind(spec.counters.kind).extractor(spec)
