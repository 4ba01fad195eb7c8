"""Contribution bounds per privacy unit (issue 28; DESIGN §2 "Privacy unit"): the bookkeeping
that lets a stream protect a person (a patient, a device) instead of one event.

A stream may name the field that identifies its unit and bound what one unit contributes:
at most ``max_events_per_period`` records in any one period and records in at most
``max_periods_per_epoch`` periods of an epoch (:class:`PrivacyUnit`). A record beyond a bound
is dropped, in arrival order: whether it counts depends on that record and on the unit's own
earlier records only, never on another unit's. A unit then adds at most
``M = max_events_per_period x max_periods_per_epoch`` records to an epoch, so the stream's noise
is calibrated on ``M`` times the event-level sensitivity (:attr:`PrivacyUnit.multiplier`; L1
and L2 alike, by the triangle inequality over the unit's records), and the guarantee holds per
unit per epoch; over the stream's life a unit's losses compose across epochs.

Identifiers are kept only as keyed hashes (:func:`unit_digest`: HMAC-SHA-256 under a secret
key from the worker's configuration, truncated to 16 bytes), in protected state, and every
epoch's bookkeeping is dropped when the epoch closes. :class:`UnitBookkeeping` is pure data
with a plain state for the checkpoint protocol.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamdp.errors import ConfigError, StateError

#: Bytes of a unit's keyed digest kept (128 bits: collisions among 10^9 units have
#: probability below 10^-20; a collision only makes two units share one bound, never loosens it).
DIGEST_BYTES = 16
#: The shortest secret key accepted (bytes).
MIN_KEY_BYTES = 16


@dataclass(frozen=True)
class PrivacyUnit:
    """A stream's privacy unit: the record ``field`` naming it and its contribution bounds."""

    field: str
    max_events_per_period: int
    max_periods_per_epoch: int

    def __post_init__(self) -> None:
        for name in ("max_events_per_period", "max_periods_per_epoch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"privacy_unit.{name} must be an integer >= 1, got {value!r}")

    @property
    def multiplier(self) -> int:
        """``M``: the most records one unit adds to one epoch; the event-level sensitivity
        times ``M`` is the unit-level one."""
        return self.max_events_per_period * self.max_periods_per_epoch


def unit_digest(key: bytes, unit_id: str) -> bytes:
    """The keyed hash a unit is known by in state: HMAC-SHA-256(key, id), first 16 bytes."""
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"the privacy-unit key must hold at least {MIN_KEY_BYTES} bytes of secret, got "
            f"{len(key)}"
        )
    mac = hmac.new(key, unit_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return mac.digest()[:DIGEST_BYTES]


@dataclass
class UnitBookkeeping:
    """One stream's per-unit counts in its current epoch (protected state).

    ``periods[u]``: the periods (absolute indices) unit ``u`` has a counted record in this
    epoch, in the order they were first used; ``events[(u, j)]``: its counted records in
    period ``j`` while ``j`` is open. :meth:`admit` decides and records one record;
    :meth:`close_period` drops a closed period's per-period counts; :meth:`roll_epoch` drops
    everything (a new epoch starts with no unit seen).
    """

    unit: PrivacyUnit
    epoch: int = 0
    periods: dict[bytes, list[int]] = field(default_factory=dict)
    events: dict[tuple[bytes, int], int] = field(default_factory=dict)

    def admit(self, digest: bytes, period: int) -> bool:
        """Count one record of unit ``digest`` in absolute period ``period`` if the unit's
        bounds allow it (then record it); False leaves everything unchanged. Depends on this
        unit's own earlier records only."""
        used = self.periods.get(digest, [])
        if period not in used and len(used) >= self.unit.max_periods_per_epoch:
            return False
        if self.events.get((digest, period), 0) >= self.unit.max_events_per_period:
            return False
        if period not in used:
            self.periods.setdefault(digest, []).append(period)
        self.events[(digest, period)] = self.events.get((digest, period), 0) + 1
        return True

    def close_period(self, period: int) -> None:
        """Period ``period`` closed: no record is counted in it any more, so its per-unit
        record counts are dropped (the periods a unit used stay until the epoch ends)."""
        for key in [k for k in self.events if k[1] == period]:
            del self.events[key]

    def roll_epoch(self, epoch: int) -> None:
        """A new epoch: every unit starts again with nothing counted."""
        if epoch <= self.epoch:
            raise StateError(f"epoch {epoch} does not follow epoch {self.epoch}")
        self.epoch = epoch
        self.periods.clear()
        self.events.clear()

    @property
    def units(self) -> int:
        """Units with a counted record in this epoch (protected: a count of people)."""
        return len(self.periods)

    def state(self) -> dict[str, Any]:
        """Plain JSON-able state (digests as hex): protect it like the input."""
        return {
            "epoch": self.epoch,
            "periods": {d.hex(): list(p) for d, p in self.periods.items()},
            "events": [[d.hex(), j, n] for (d, j), n in self.events.items()],
        }

    @classmethod
    def from_state(cls, unit: PrivacyUnit, state: Mapping[str, Any]) -> UnitBookkeeping:
        try:
            periods = {
                bytes.fromhex(d): [int(j) for j in p] for d, p in dict(state["periods"]).items()
            }
            events = {(bytes.fromhex(d), int(j)): int(n) for d, j, n in state["events"]}
            book = cls(unit, int(state["epoch"]), periods, events)
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(f"privacy-unit state is malformed: {error!r}") from None
        for (digest, period), n in book.events.items():
            if (
                period not in book.periods.get(digest, [])
                or not 1 <= n <= unit.max_events_per_period
            ):
                raise StateError("privacy-unit state is inconsistent with its bounds")
        if any(len(p) > unit.max_periods_per_epoch for p in book.periods.values()):
            raise StateError("privacy-unit state holds a unit over its period bound")
        return book
