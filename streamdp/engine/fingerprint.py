"""Configuration fingerprints: the SHA-256 of a configuration's canonical JSON.

A snapshot stores the fingerprint of the configuration it was taken under and refuses to
restore under a different one (:meth:`streamdp.engine.spec.EngineSpec.fingerprint`). Canonical
means keys sorted, no whitespace, exact decimals as their text and dates as ISO 8601, so the
same TOML always gives the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any


def config_sha256(raw: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the canonical JSON of a parsed configuration (decimals as ``Decimal``)."""
    text = json.dumps(_jsonable(raw), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
