"""Reading a stream's ``privacy_unit`` table (issue 28) into a
:class:`~streamdp.engine.privacy_unit.PrivacyUnit`, with errors that say where and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamdp.engine.config_reader import ConfigReader
from streamdp.engine.privacy_unit import PrivacyUnit

_UNIT_KEYS = ("field", "max_events_per_period", "max_periods_per_epoch")
#: Record fields a privacy unit cannot be: every record has them, none names a person.
_RESERVED_FIELDS = ("event_id", "event_time", "source", "type")


def read_privacy_unit(
    ctx: ConfigReader, table: Mapping[str, Any], horizon: int
) -> PrivacyUnit | None:
    """The stream's privacy unit (``privacy_unit = { field = "patient_id",
    max_events_per_period = 2, max_periods_per_epoch = 30 }``), None when it protects one
    event."""
    if "privacy_unit" not in table:
        return None
    raw = ctx.table(table["privacy_unit"], "privacy_unit")
    ctx.only(raw, _UNIT_KEYS, "privacy_unit")
    for key in _UNIT_KEYS:
        if key not in raw:
            raise ctx.fail(
                f"privacy_unit.{key}",
                "missing: a privacy unit names its identifying field and bounds both the "
                "records per period and the periods per epoch one unit may contribute",
            )
    name = raw["field"]
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ctx.fail("privacy_unit.field", f"must name a record field, got {name!r}")
    if name in _RESERVED_FIELDS:
        raise ctx.fail(
            "privacy_unit.field",
            f"{name!r} is read by every record ({', '.join(_RESERVED_FIELDS)}); name the field "
            "that identifies the person or device, e.g. patient_id",
        )
    per_period = ctx.integer(raw["max_events_per_period"], "privacy_unit.max_events_per_period", 1)
    periods = ctx.integer(raw["max_periods_per_epoch"], "privacy_unit.max_periods_per_epoch", 1)
    if periods > horizon:
        raise ctx.fail(
            "privacy_unit.max_periods_per_epoch",
            f"is {periods}, more than the {horizon} periods of an epoch (horizon); "
            f"at most {horizon}",
        )
    return PrivacyUnit(name, per_period, periods)
