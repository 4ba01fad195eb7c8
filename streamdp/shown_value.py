"""A configuration value as its author wrote it, for error messages.

Specs are read with ``tomllib`` (decimals as :class:`~decimal.Decimal`), so ``{value!r}`` in a
message printed Python's view of it (``Decimal('-1.0')``, ``True``, ``None``) instead of the
TOML text (``-1.0``, ``true``) the author typed.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any


def shown(value: Any) -> str:
    """``value`` in TOML's spelling: numbers as written, ``true``/``false``, text quoted,
    arrays and inline tables element by element; ``None`` (a missing value) as "not set"."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal | Fraction | int | float):
        return str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {shown(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)
