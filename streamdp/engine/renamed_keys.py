"""The configuration keys renamed since the first format, and the way back to the old names.

Configuration format 2 has one vocabulary (issue 14): Delta is the *sensitivity*, never
``delta``, which DP readers take for the delta of (epsilon, delta)-DP. A configuration still
using an old key is refused with a message naming the new one
(:meth:`streamdp.engine.config_reader.ConfigReader.only`), and a snapshot stored under the old
names restores once the operator renames them (:func:`with_first_format_keys`; see
docs/consuming.md, "Migrating from schema_version 1").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Keys of the first configuration format and their names since (one vocabulary: Delta is the
#: *sensitivity*, never ``delta``, which DP readers take for the delta of (epsilon, delta)-DP).
RENAMED_KEYS = {
    "delta": "sensitivity",
    "strategy": "mechanism",
    "over_delta": "over_sensitivity",
}


def with_first_format_keys(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parsed configuration ``raw`` with every stream's renamed keys written with their
    first-format names (:data:`RENAMED_KEYS`), or None when it has no ``streams`` table."""
    streams = raw.get("streams")
    if not isinstance(streams, Mapping):
        return None
    legacy_name = {new: old for old, new in RENAMED_KEYS.items()}
    legacy = dict(raw)
    legacy["streams"] = {
        name: {legacy_name.get(k, k): v for k, v in table.items()}
        if isinstance(table, Mapping)
        else table
        for name, table in streams.items()
    }
    return legacy
