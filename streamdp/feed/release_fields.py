"""The optional fields of a public release record that say what it protects and where it
sits (pure): zCDP (``rho``, ``privacy_delta``, ``l2_sensitivity``), ``budget_group``,
``privacy_unit``, a places stream's ``place`` and ``cell``. Each reader answers the values, or
Nones when the record has none of its fields; a field present but not as the schema defines it
raises :class:`MalformedFieldError`, and the record is not shown (it would state the wrong
guarantee: a text ``rho`` read as absent showed a zCDP stream as pure epsilon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamdp.feed.record_fields import int_field, number_field, text_field


@dataclass(frozen=True)
class Place:
    """Where a places stream's counter sits in its public tree (release field ``place``)."""

    node: str
    parent: str | None  # None at the root
    label: str
    level: int


class MalformedFieldError(Exception):
    """An optional field is present but not as the schema defines it: the record is not shown
    (a mistyped ``rho`` must not turn a zCDP release into a pure-epsilon one)."""


def zcdp_fields(record: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """``(rho, delta, l2_sensitivity)`` of a zCDP release (each a positive number, delta below
    1), ``(None, None, None)`` for a pure-epsilon release (none of the four fields present)."""
    fields = ("privacy_definition", "rho", "privacy_delta", "l2_sensitivity")
    if all(name not in record for name in fields):
        return None, None, None
    if record.get("privacy_definition") != "zcdp":
        raise MalformedFieldError
    rho, delta = number_field(record.get("rho")), number_field(record.get("privacy_delta"))
    l2 = number_field(record.get("l2_sensitivity"))
    if rho is None or delta is None or l2 is None or rho <= 0 or l2 <= 0 or not 0 < delta < 1:
        raise MalformedFieldError
    return rho, delta, l2


def budget_group_fields(record: dict[str, Any]) -> tuple[str | None, float | None]:
    """``(name, share)`` of a release's ``budget_group`` (share in (0, 1]), ``(None, None)``
    when the record has none."""
    if "budget_group" not in record:
        return None, None
    group = record["budget_group"]
    if not isinstance(group, dict):
        raise MalformedFieldError
    name, share = text_field(group.get("name")), number_field(group.get("share"))
    if name is None or share is None or not 0 < share <= 1:
        raise MalformedFieldError
    return name, share


def unit_fields(record: dict[str, Any]) -> tuple[str | None, tuple[int, int] | None]:
    """``(field, (max_events_per_period, max_periods_per_epoch))`` of a release protecting a
    privacy unit, ``(None, None)`` when the record protects events."""
    if "privacy_unit" not in record:
        return None, None
    unit = record["privacy_unit"]
    if not isinstance(unit, dict):
        raise MalformedFieldError
    name = text_field(unit.get("field"))
    per_period = int_field(unit.get("max_events_per_period"))
    periods = int_field(unit.get("max_periods_per_epoch"))
    if name is None or per_period is None or periods is None or per_period < 1 or periods < 1:
        raise MalformedFieldError
    return name, (per_period, periods)


def place_fields(record: dict[str, Any]) -> tuple[Place | None, str | None]:
    """``(place, cell)`` of a places stream's release (cell: None without attributes),
    ``(None, None)`` for a stream of another kind."""
    if "place" not in record:
        if "cell" in record:
            raise MalformedFieldError
        return None, None
    where = record["place"]
    if not isinstance(where, dict):
        raise MalformedFieldError
    node, label, level = (
        text_field(where.get("node")),
        text_field(where.get("label")),
        int_field(where.get("level")),
    )
    parent = where.get("parent")
    if node is None or label is None or level is None or level < 0:
        raise MalformedFieldError
    if not (parent is None or text_field(parent) is not None):
        raise MalformedFieldError
    cell = record.get("cell")
    if cell is not None and text_field(cell) is None:
        raise MalformedFieldError
    return Place(node, parent if isinstance(parent, str) else None, label, level), text_field(cell)
