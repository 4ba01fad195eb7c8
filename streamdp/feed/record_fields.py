"""Reading the fields of a public record: its header (kind, schema version) and typed values
(pure). Shared by :mod:`streamdp.feed.records`; nothing here keeps a value it did not check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

from streamdp.engine.config_reader import NAME_PATTERN

V = TypeVar("V")

#: The ``schema_version``s the feed reads (docs/consuming.md, section 6): 2, the current one
#: (``schemas/*.schema.json``), and 1, whose release field ``delta`` is read as ``sensitivity``
#: ("Migrating from schema_version 1"). Records of any other version are not shown.
KNOWN_SCHEMA_VERSIONS = (1, 2)
#: Record kinds streamdp writes: any other ``kind`` is reported as unknown, not quoted.
_KINDS = ("release", "consistent", "dead_letter")


class NotJson:
    """What a line that is not JSON decodes to (:data:`NOT_JSON`): never shown, counted."""


NOT_JSON = NotJson()


def unreadable(record: object, kind: str) -> str | None:
    """Why ``record``, read from the source of ``kind`` records, is not even parsed (not JSON,
    not an object, another kind, a schema version the feed does not know), or None. The reason
    goes to the operator's console: it names no value of the record beyond a known kind or a
    small version number."""
    if isinstance(record, NotJson):
        return "not JSON"
    if not isinstance(record, dict):
        return "not a JSON object"
    found = record.get("kind")
    if found != kind:
        return f"kind {found}" if isinstance(found, str) and found in _KINDS else "unknown kind"
    version = int_field(record.get("schema_version"))  # an integer, never true or 2.0
    if version in KNOWN_SCHEMA_VERSIONS:
        return None
    if "schema_version" not in record:
        return "no schema_version"
    small = version is not None and 0 <= version < 1000
    return f"schema_version {version}" if small else "unknown schema_version"


def int_field(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def count_field(value: object) -> int | float | None:
    """A released count or total: an int stays an int, a finite real number (kary_gls) a float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return number_field(value)


def number_field(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    real = float(value)
    return real if math.isfinite(real) else None


def text_field(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def name_field(value: object) -> str | None:
    """A stream name as a spec may declare one (``NAME_PATTERN``), else None: the static
    site names a folder after it, so a record naming ``../x`` or ``/tmp/x`` is not shown
    rather than written outside ``--output-dir`` (security audit of 2026-11-28)."""
    return value if isinstance(value, str) and NAME_PATTERN.match(value) else None


def number_map(value: object) -> dict[str, float] | None:
    return json_map(value, number_field)


def count_map(value: object) -> dict[str, int] | None:
    """A map of non-negative integers (a non-negative estimate), else None."""
    return json_map(value, lambda item: None if (n := int_field(item)) is None or n < 0 else n)


def json_map(value: object, parse: Callable[[object], V | None]) -> dict[str, V] | None:
    """A non-empty JSON object whose every value ``parse`` accepts, else None."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[str, V] = {}
    for key, item in value.items():
        parsed = parse(item)
        if not isinstance(key, str) or parsed is None:
            return None
        out[key] = parsed
    return out


def union(mine: Mapping[str, V] | None, theirs: Mapping[str, V] | None) -> Mapping[str, V] | None:
    """Two parts' maps of one record merged (None when either part lacks it)."""
    return None if mine is None or theirs is None else {**mine, **theirs}
