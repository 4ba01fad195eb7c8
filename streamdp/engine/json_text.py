"""JSON text of single values exactly as ``json.dumps`` writes them (ASCII-escaped strings,
``repr`` of finite floats), for records assembled from pre-written pieces: a wide close writes
a million release records, and building a dict for each to hand to ``json.dumps`` cost more
than the close itself. Every record's text stays what ``json.dumps(record.to_dict(),
separators=(",", ":"))`` gives, byte for byte (tests/test_release_json.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii

#: a string as a JSON string literal, ASCII-escaped (json's own C encoder)
string: Callable[[str], str] = encode_basestring_ascii


def number(value: int | float) -> str:
    """An int or float as ``json.dumps`` writes it (``NaN``/``Infinity`` as it does too; no
    release carries them)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return float.__repr__(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return int.__repr__(value)


def members(fields: Mapping[str, object]) -> str:
    """``fields`` as the members of a JSON object (no braces), with a leading comma when there
    are any: what ``**fields`` adds at the end of a record's dict."""
    if not fields:
        return ""
    return "," + json.dumps(dict(fields), separators=(",", ":"))[1:-1]
