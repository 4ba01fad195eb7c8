"""Reading one table of a configuration, with messages that say where a problem is.

:class:`ConfigReader` checks the value of one field (a name, a choice, an integer in a range, a
boolean, an exact decimal epsilon, a duration) and raises a
:class:`~streamdp.errors.ConfigError` of the form ``<origin>: stream 'x': field 'y': ...`` that
names what was wrong and what is allowed. The spec loader and the stream kinds' parsers
(:mod:`streamdp.kinds`) read every table through it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from streamdp.engine.renamed_keys import RENAMED_KEYS
from streamdp.errors import ConfigError
from streamdp.shown_value import shown

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
NAME_RULE = "1-64 characters from letters, digits and _ . + - (starting with a letter or digit)"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


#: The longest duration a spec may give (an allowed lateness, a fixed period): 100 years.
MAX_DURATION_SECONDS = 100 * 366 * 86400.0


class ConfigReader:
    """Reads one table of the configuration and says where a problem is in its messages:
    ``<origin>: stream 'x': field 'y': ...`` (used by the stream kinds' parsers too)."""

    def __init__(self, origin: str, where: str) -> None:
        self.origin = origin
        self.where = where

    def fail(self, field_name: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {self.where}: field {field_name!r}: {problem}")

    def table(self, data: Any, field_name: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(field_name, f"must be a table, got {_kind(data)}")
        return cast(dict[str, Any], data)

    def only(self, data: Mapping[str, Any], allowed: tuple[str, ...], field_name: str) -> None:
        unknown = [k for k in data if k not in allowed]
        if unknown:
            renamed = RENAMED_KEYS.get(unknown[0])
            if renamed is not None and renamed in allowed:
                raise self.fail(
                    f"{field_name}.{unknown[0]}" if field_name else unknown[0],
                    f"was renamed to {renamed!r} (configuration format 2, see "
                    "docs/consuming.md 'Migrating from schema_version 1'); rename the key",
                )
            raise self.fail(
                f"{field_name}.{unknown[0]}" if field_name else unknown[0],
                f"unknown key; allowed keys here: {', '.join(allowed)}",
            )

    def name(self, value: Any, field_name: str) -> str:
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            raise self.fail(field_name, f"must be a name of {NAME_RULE}, got {shown(value)}")
        return value

    def choice(self, value: Any, field_name: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.fail(field_name, f"must be one of {', '.join(allowed)}; got {shown(value)}")
        return cast(str, value)

    def integer(self, value: Any, field_name: str, lo: int, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field_name, f"must be an integer, got {shown(value)}")
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise self.fail(field_name, f"must be {bound}, got {value}")
        return value

    def boolean(self, value: Any, field_name: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field_name, f"must be true or false, got {shown(value)}")
        return value

    def epsilon(self, value: Any, field_name: str) -> Decimal:
        try:
            number = (
                Decimal(str(value))
                if isinstance(value, int | str | Decimal) and not isinstance(value, bool)
                else None
            )
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or number <= 0:
            raise self.fail(
                field_name, f"must be a positive decimal number such as 0.5, got {shown(value)}"
            )
        return number

    def duration(self, value: Any, field_name: str, *, positive: bool) -> float:
        seconds: float | None = None
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            seconds = float(value)
        elif isinstance(value, str):
            match = _DURATION.match(value)
            if match:
                seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        if seconds is None or seconds < 0 or (positive and seconds <= 0):
            raise self.fail(
                field_name,
                "must be a duration: seconds as a number, or text like '90s', '15m', '2h', "
                f"'1d'{' (greater than zero)' if positive else ''}; got {shown(value)}",
            )
        if not seconds <= MAX_DURATION_SECONDS:  # NaN too: 1e400 read as infinite
            raise self.fail(
                field_name,
                f"{shown(value)} is longer than 100 years: a stream with it would never release "
                "anything",
            )
        return seconds


def _kind(value: Any) -> str:
    return type(value).__name__
