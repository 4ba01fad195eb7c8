"""Dead letters always fit (DESIGN §5; issue 16): the byte budgets and the cutting to them.

Whatever the rejected record held, a dead letter's encoded key plus value is at most
:data:`MAX_DEAD_LETTER_BYTES`, far below a producer's request limit (Kafka's default 1,000,000
bytes). The raw record is cut to :data:`MAX_DEAD_LETTER_RAW` bytes of escaped JSON text
(:func:`fit_raw`), with its full length and SHA-256 beside it (of :func:`raw_bytes`); the
message is cut to :data:`MAX_DEAD_LETTER_MESSAGE` (:func:`fit_text`); a name or event id that is
not Unicode text of at most :data:`MAX_LABEL_CHARS` characters is replaced by
``"sha256:<hex of its UTF-8 bytes>"`` (:func:`safe_label`) so every key encodes to UTF-8.
:class:`streamdp.engine.records.DeadLetterRecord` applies all of this on construction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Final

from streamdp.engine.events import is_unicode_text

#: Most bytes of the raw record a dead letter carries, measured as escaped JSON string content
#: (``\uXXXX`` escapes make non-ASCII text up to 12 bytes a character).
MAX_DEAD_LETTER_RAW: Final = 16_384
#: Most bytes of a dead letter's message, measured like the raw record.
MAX_DEAD_LETTER_MESSAGE: Final = 1_024
#: Longest stream, source, topic or event id a dead letter shows as it is (Kafka's limit on
#: topic names; event ids are at most 200 characters); longer ones are shown by digest.
MAX_LABEL_CHARS: Final = 249
#: Largest signed 64-bit integer: offsets beyond it are not Kafka offsets and are not shown.
MAX_OFFSET: Final = 2**63 - 1
# field names, punctuation, schema_version, kind, reason, raw_encoding, raw_truncated
_SKELETON_BYTES: Final = 512
_NUMBER_BYTES: Final = 20  # an int64 in decimal
#: Bound on ``len(key.encode()) + len(to_json().encode())`` of any dead letter: the skeleton,
#: raw and message budgets, the digest, two numbers, four labels as JSON fields (12 bytes a
#: character escaped) and the key twice: escaped inside the value and as UTF-8 bytes (4 a
#: character; three labels, an offset and three separators).
MAX_DEAD_LETTER_BYTES: Final = (
    _SKELETON_BYTES
    + MAX_DEAD_LETTER_RAW
    + MAX_DEAD_LETTER_MESSAGE
    + 64
    + 2 * _NUMBER_BYTES
    + 4 * 12 * MAX_LABEL_CHARS
    + (3 * 12 * MAX_LABEL_CHARS + _NUMBER_BYTES + 3)
    + (3 * 4 * MAX_LABEL_CHARS + _NUMBER_BYTES + 3)
)


def _escaped_size(text: str) -> int:
    """Bytes of ``text`` inside a JSON string as ``json.dumps`` writes it (ASCII-escaped)."""
    return len(json.dumps(text)) - 2


def _longest_prefix(text: str, budget: int) -> int:
    """Length of the longest prefix of ``text`` whose escaped size is at most ``budget``.

    Every character costs 1 to 12 escaped bytes, so the answer is at most ``budget``
    characters; binary search over prefix lengths (O(budget log budget))."""
    low, high = 0, min(len(text), budget)
    while low < high:
        middle = (low + high + 1) // 2
        if _escaped_size(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def fit_text(text: str, budget: int, *, marker: str = "...") -> tuple[str, bool]:
    """``text`` cut so that its escaped JSON size is at most ``budget`` bytes (``marker``
    appended when cut, within the budget); True when it was cut."""
    if 12 * len(text) <= budget or _escaped_size(text) <= budget:
        return text, False
    return text[: _longest_prefix(text, budget - len(marker))] + marker, True


def raw_bytes(raw: str, encoding: str) -> bytes:
    """The original bytes a dead letter's ``raw`` text stands for."""
    if encoding == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            pass
    return raw.encode("utf-8", "surrogatepass")


def fit_raw(raw: str, encoding: str) -> tuple[str, bool]:
    """``raw`` within :data:`MAX_DEAD_LETTER_RAW`; base64 is cut at a multiple of 4
    characters so that what is kept still decodes (to a prefix of the record)."""
    if encoding == "base64" and raw.isascii():
        if len(raw) <= MAX_DEAD_LETTER_RAW:
            return raw, False
        return raw[: MAX_DEAD_LETTER_RAW - MAX_DEAD_LETTER_RAW % 4], True
    return fit_text(raw, MAX_DEAD_LETTER_RAW, marker="")


def safe_label(value: str | None) -> str | None:
    """``value`` when it is Unicode text of at most :data:`MAX_LABEL_CHARS` characters, else
    ``"sha256:"`` and the hex digest of its UTF-8 bytes (lone surrogates encoded as such)."""
    if value is None or (len(value) <= MAX_LABEL_CHARS and is_unicode_text(value)):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest}"
