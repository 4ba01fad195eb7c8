"""Contribution bounds per privacy unit (issue 28; DESIGN §2 "Privacy unit"): the bookkeeping
that lets a stream protect a person (a patient, a device) instead of one event.

A stream may name the field that identifies its unit and bound what one unit contributes:
at most ``max_events_per_period`` records in any one period and records in at most
``max_periods_per_epoch`` periods of an epoch (:class:`PrivacyUnit`). A record beyond a bound
is dropped, in arrival order: whether it counts depends on that record and on the unit's own
earlier records only, never on another unit's. A unit then adds at most
``a x b = max_events_per_period x max_periods_per_epoch`` records to an epoch. The stream's
noise is calibrated on ``M`` times the event-level sensitivity (:func:`unit_multiplier`; L1 and
L2 alike, by the triangle inequality over the records that change), and the guarantee holds per
unit per epoch; over the stream's life a unit's losses compose across epochs.

``M = a x max(b, 2)``, not ``a x b``: one record carrying a unit's identifier (forged, or the
unit's own) can also change which of that unit's other records count. Put first in a period the
unit had not used, it takes one of the unit's ``b`` periods, so a period the unit used later is
dropped whole (up to ``a`` records out) while the new period's records count (up to ``a`` in):
``2a`` records move (audit of 2026-11-28: with ``b = 1``, ``a + 1`` records moved against a
calibration on ``a``). In a period the unit already used it displaces at most one record (2
move). No other unit's decision changes. So one record moves at most ``2a`` records and one
unit's presence at most ``a b``: ``max(a b, 2a)`` covers both, and only ``b = 1`` pays for it (it
costs what ``b = 2`` does).

Identifiers are kept only as keyed hashes (:func:`unit_digest`: HMAC-SHA-256 under a secret
key from the worker's configuration, truncated to 16 bytes), in protected state, and every
epoch's bookkeeping is dropped when the epoch closes. :class:`UnitBookkeeping` is pure data
with a plain state for the checkpoint protocol.
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamdp.errors import ConfigError, StateError
from streamdp.shown_value import shown

#: Bytes of a unit's keyed digest kept (128 bits: collisions among 10^9 units have
#: probability below 10^-20; a collision makes two units share one bound: the merged unit stays
#: within it, but each of the two is protected at twice the calibrated change, as for two ids
#: that normalise alike, see :func:`unit_digest`).
DIGEST_BYTES = 16
#: The shortest secret key accepted (bytes).
MIN_KEY_BYTES = 16
#: The fewest different byte values a key file may hold: 16 random bytes hold about 15, their
#: base64 text about 14; "aaaaaaaaaaaaaaaa" one (security audit of 2026-11-28: accepted).
MIN_DISTINCT_KEY_BYTES = 8


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
                raise ConfigError(
                    f"privacy_unit.{name} must be an integer >= 1, got {shown(value)}"
                )

    @property
    def multiplier(self) -> int:
        """``M`` (:func:`unit_multiplier`): the event-level sensitivity times ``M`` is the
        stream's."""
        return unit_multiplier(self.max_events_per_period, self.max_periods_per_epoch)


def unit_multiplier(per_period: int, periods: int) -> int:
    """``M = a x max(b, 2)``: the most records that one unit's presence (``a b``), or one record
    carrying its identifier (``2a``), changes the fate of within an epoch (module docstring)."""
    return per_period * max(periods, 2)


def unit_digest(key: bytes, unit_id: str) -> bytes:
    """The keyed hash a unit is known by in state: HMAC-SHA-256(key, id), first 16 bytes, of the
    identifier in Unicode normal form C, so that canonically equivalent spellings of one
    identifier ("é" as one code point, or "e" and a combining accent) are one unit; an integer
    id and its decimal text are one unit too. One person written two ways then has one
    allowance (two would let their records move twice the calibrated change); two people whose
    ids normalise alike share one, and removing either may move the releases by twice the
    calibrated change (audit of 2026-11-28; docs/operating.md, "Protecting people")."""
    unit_id = unicodedata.normalize("NFC", unit_id)
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"the privacy-unit key must hold at least {MIN_KEY_BYTES} bytes of secret, got "
            f"{len(key)}"
        )
    mac = hmac.new(key, unit_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return mac.digest()[:DIGEST_BYTES]


class UnitBookkeeping:
    """One stream's per-unit counts in its open epochs (protected state).

    The primary data is the admission log: for each period ``j`` of an epoch not yet ended,
    the digests of the units whose records were counted in ``j``, in arrival order (one entry
    per counted record; append-only while the epoch lasts, so the daemon stores it by
    position, O(new)). Two indexes are derived from it: the periods each unit used in each
    epoch and, while a period is open, each unit's records in it. :meth:`admit` decides and
    records one record; :meth:`close_period` drops a closed period's per-period counts and,
    at an epoch's last period, the whole epoch (a new epoch starts with no unit seen).
    """

    def __init__(self, unit: PrivacyUnit, horizon: int, key_check: str) -> None:
        if horizon < 1:
            raise ConfigError(f"horizon must be >= 1, got {horizon}")
        self.unit = unit
        self.horizon = int(horizon)
        self.key_check = key_check
        self.closed = 0  # absolute periods closed
        self.admitted: dict[int, list[bytes]] = {}
        # (unit, epoch) -> (the unit's digest object, the periods it used): the log holds that
        # one object for all of a unit's records (8 bytes per record instead of a copy of 49)
        self._periods: dict[tuple[bytes, int], tuple[bytes, list[int]]] = {}
        self._events: dict[tuple[bytes, int], int] = {}  # (unit, open period) -> records

    def admit(self, digest: bytes, period: int) -> bool:
        """Count one record of unit ``digest`` in absolute period ``period`` (open) if the
        unit's bounds allow it, and record it; False changes nothing. Depends on this unit's
        own earlier records only."""
        if period < self.closed:
            raise StateError(f"period {period} is closed (closed through {self.closed})")
        epoch_key = (digest, period // self.horizon)
        known = self._periods.get(epoch_key)
        if known is None:
            known = (digest, [])
        elif period not in known[1] and len(known[1]) >= self.unit.max_periods_per_epoch:
            return False
        digest, used = known
        event_key = (digest, period)
        counted = self._events.get(event_key, 0)
        if counted >= self.unit.max_events_per_period:
            return False
        if counted == 0:
            used.append(period)
            self._periods[epoch_key] = known
        self._events[event_key] = counted + 1
        self.admitted.setdefault(period, []).append(digest)
        return True

    def close_period(self, period: int) -> None:
        """Period ``period``, the oldest open one, closed: its per-unit record counts go (the
        periods a unit used stay until its epoch ends); closing an epoch's last period drops
        that epoch's log and indexes. O(records of what is dropped)."""
        for digest in self.admitted.get(period, ()):
            self._events.pop((digest, period), None)
        self.closed = period + 1
        epoch, index = divmod(period, self.horizon)
        if index == self.horizon - 1:
            for j in range(epoch * self.horizon, period + 1):
                for digest in self.admitted.pop(j, ()):
                    self._periods.pop((digest, epoch), None)

    def log(self) -> Mapping[int, Sequence[bytes]]:
        """The admission log by period (a live view: read, never change). Entries are only
        appended while their epoch lasts and go when it ends, so a reader that stored the first
        ``n`` of a period stores ``log[j][n:]`` next."""
        return self.admitted

    @property
    def units(self) -> int:
        """Units with a counted record in an open epoch (protected: a count of people)."""
        return len({digest for digest, _ in self._periods})

    def state(self) -> dict[str, Any]:
        """Plain JSON-able state (digests as hex): protect it like the input."""
        return {
            "key_check": self.key_check,
            "closed": self.closed,
            "admitted": [[j, [d.hex() for d in log]] for j, log in sorted(self.admitted.items())],
        }

    @classmethod
    def from_state(
        cls,
        unit: PrivacyUnit,
        horizon: int,
        key_check: str,
        state: Mapping[str, Any],
        *,
        legacy_key_check: str | None = None,
    ) -> UnitBookkeeping:
        """Rebuild from :meth:`state` (or the daemon's stored log), checking that it was kept
        under the same key and within ``unit``'s bounds. ``legacy_key_check``: the key's tag
        as states written before the current tag held it; such a state restores only while
        it holds no digest (nothing in it was hashed the old way)."""
        written = state.get("key_check")
        if legacy_key_check is not None and written == legacy_key_check:
            if any(log for _, log in state.get("admitted", [])):
                raise StateError(
                    "the privacy-unit bookkeeping was written by a streamdp from before "
                    "2026-11-28 that may have hashed identifiers without normalising them: "
                    "restoring it could give units a second allowance; keep the version that "
                    "wrote it running until the stream's epoch ends (the log is empty then) and "
                    "upgrade then, or start a new deployment (docs/operating.md section 6)"
                )
            written = key_check  # nothing hashed in it: adopt the current tag
        if written != key_check:
            raise StateError(
                "the privacy-unit bookkeeping was kept under a different secret key (or by a "
                "streamdp that hashed identifiers another way): restore with the key and the "
                "version it was written with (units would otherwise start again with nothing "
                "counted, loosening their bounds)"
            )
        book = cls(unit, horizon, key_check)
        try:
            book.closed = int(state["closed"])
            admitted = {int(j): [bytes.fromhex(d) for d in log] for j, log in state["admitted"]}
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(f"privacy-unit state is malformed: {error!r}") from None
        first_open_epoch = book.closed // horizon
        for j in sorted(admitted):
            if j // horizon < first_open_epoch:
                raise StateError(f"privacy-unit state holds period {j} of an ended epoch")
            log = []
            for digest in admitted[j]:
                epoch_key = (digest, j // horizon)
                canonical, used = book._periods.setdefault(epoch_key, (digest, []))
                if j not in used:
                    used.append(j)
                if j >= book.closed:
                    book._events[(canonical, j)] = book._events.get((canonical, j), 0) + 1
                log.append(canonical)
            book.admitted[j] = log
        if any(len(p) > unit.max_periods_per_epoch for _, p in book._periods.values()) or any(
            n > unit.max_events_per_period for n in book._events.values()
        ):
            raise StateError("privacy-unit state holds a unit over its bounds")
        return book


#: The label :func:`key_check` hashes. Its "e" and combining acute accent are what Unicode
#: normal form C changes, so the tag also differs between hashing schemes: a state written
#: before identifiers were normalised (before 2026-11-28) hashed them raw, and restoring it
#: under NFC would give every unit spelt with a combining mark a second allowance.
KEY_CHECK_LABEL = "streamdp.privacy-unit.key-check.nfc:e\u0301"


def legacy_key_check(key: bytes) -> str:
    """The key's tag as states written before :data:`KEY_CHECK_LABEL` held it (an ASCII label,
    so the same under either hashing scheme)."""
    return unit_digest(key, "streamdp.privacy-unit.key-check").hex()


def key_check(key: bytes) -> str:
    """A public-safe tag of the secret key and of how identifiers are hashed (HMAC of a fixed
    label under it, through :func:`unit_digest`): states remember it, so a restore under
    another key, or of a state whose digests were made another way, is refused instead of
    resetting units' bounds."""
    return unit_digest(key, KEY_CHECK_LABEL).hex()


def load_unit_key(path: str) -> bytes:
    """The secret key in file ``path`` (its bytes, surrounding whitespace removed): at least
    :data:`MIN_KEY_BYTES`, e.g. from ``head -c 32 /dev/urandom | base64 > unit.key``. Keep the
    file like the input topic's credentials; the same key on every restart."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as error:
        raise ConfigError(
            f"--unit-key-file {path!r} cannot be read: {error.strerror or error}"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"--unit-key-file {path!r} holds {len(key)} bytes; a privacy-unit key needs at "
            f"least {MIN_KEY_BYTES} (e.g. head -c 32 /dev/urandom | base64 > {path})"
        )
    if len(set(key)) < MIN_DISTINCT_KEY_BYTES:
        raise ConfigError(
            f"--unit-key-file {path!r} holds only {len(set(key))} different byte values: not a "
            f"random secret (a guessable key lets anyone test an identifier against the state's "
            f"digests); make one with head -c 32 /dev/urandom | base64 > {path}"
        )
    return key
