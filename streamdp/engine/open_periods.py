"""The periods of one stream not yet closed: which arriving events count in which period (the
acceptance window: lateness, the stream's horizon, the future limit), the true counts of each
open period, and the content keys already counted there (true duplicates are refused).

Protected state: the true counts (Python ints). They leave this object only through the
stream's state (:mod:`streamdp.engine.stream_state`), which must be stored like the input topic,
and through the period's close, which adds noise before anything is released.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.engine.events import (
    MAX_ID_LENGTH,
    Contribution,
    RejectedError,
    UnitBoundDrop,
    extractor_for,
)
from streamdp.engine.periods import PeriodClock
from streamdp.engine.privacy_unit import (
    UnitBookkeeping,
    key_check,
    legacy_key_check,
    unit_digest,
)
from streamdp.engine.spec import StreamSpec
from streamdp.errors import ConfigError, StateError

#: The most one counter's count in one period is taken as: a larger count is released as this
#: (a public clamp, ``min(count, limit)``, which moves by at most what the count moves, so every
#: sensitivity holds). Without it a count past 2^63 - 1 (about 2^23 records of the largest
#: contribution, 2^40, in one period) made every close of the stream raise, and the worker
#: met the same error after each restart (audit of 2026-11-28); with it the node sums of the
#: longest horizon (10^7 periods, under 2^24) stay inside int64.
COUNT_LIMIT = 2**39


def _bounds_around(clock: PeriodClock, index: int) -> tuple[float, float]:
    """The instants of period ``index`` (``index_of`` is -1 for every instant before the
    first period: then up to its start)."""
    if index < 0:
        return -math.inf, clock.bounds(0)[0]
    return clock.bounds(index)


class OpenPeriods:
    """Counts accepted events into the periods from :attr:`closed` on."""

    def __init__(self, spec: StreamSpec, clock: PeriodClock, unit_key: bytes | None = None) -> None:
        self.clock = clock
        self.extractor = extractor_for(spec)
        self.width = len(spec.counters.names)
        self.horizon = spec.horizon
        self.closed = 0  # absolute periods closed (over all epochs): nothing counts in them
        self.counts: dict[int, list[int]] = {}
        self.seen: dict[int, set[str]] = {}
        # the same content keys per open period in the order they were counted, so that the
        # daemon stores the new ones by position, in O(new) (see seen_ids)
        self.seen_order: dict[int, list[str]] = {}
        self._cache = (1.0, 0.0, -1)  # [lo, hi) -> index; empty to start
        self._lateness = spec.allowed_lateness_seconds
        self._stop = spec.on_epoch_end == "stop"
        self._max_future = spec.max_future_periods
        # the acceptance window for the current arrival instant (see set_arrival): events of
        # periods below _time_lo arrived after their period's public close instant; events of
        # periods above _future_hi are too far ahead of the clock
        self._time_lo = 0
        self._future_hi: float = float("inf")
        # the periods around the last set_arrival's now - lateness and now, as bounds
        # (late_lo, late_hi, here_lo, here_hi), and its batch flag: the window holds while
        # both instants stay inside them (set_arrival per record stays cheap)
        self._window_span: tuple[float, float, float, float, bool] = (1.0, 0.0, 1.0, 0.0, False)
        # the privacy unit's bookkeeping (protected; None: the stream protects one event)
        self.units: UnitBookkeeping | None = None
        self._unit_key = b""
        self._unit_field = ""
        if spec.privacy_unit is not None:
            if unit_key is None:
                raise ConfigError(
                    f"stream {spec.name!r} declares a privacy unit: the engine needs the secret "
                    "key its unit identifiers are hashed under (--unit-key-file)"
                )
            self._unit_key = unit_key
            self._unit_field = spec.privacy_unit.field
            self.units = UnitBookkeeping(spec.privacy_unit, spec.horizon, key_check(unit_key))

    def set_arrival(self, now: float, *, batch: bool = False) -> None:
        """Set the acceptance window for events arriving at public instant ``now``.

        Stream mode: an event of period ``j`` counts only if ``j``'s close instant (its end plus
        the allowed lateness) is after ``now``, and ``j`` is at most ``max_future_periods``
        periods after the period holding ``now``. Batch mode (a file replay): every period
        still open counts; the future limit applies against ``now`` (the replay's ``--as-of``).
        Both depend on the event and the public clock only, never on other events.
        """
        since = now - self._lateness
        late_lo, late_hi, here_lo, here_hi, was_batch = self._window_span
        if late_lo <= since < late_hi and here_lo <= now < here_hi and was_batch == batch:
            return  # the same periods as the last call's (as index_of would find them)
        clock = self.clock
        late = clock.index_of(since)
        here = clock.index_of(now)
        self._time_lo = 0 if batch else max(0, late)
        self._future_hi = here + self._max_future if self._max_future else float("inf")
        self._window_span = (*_bounds_around(clock, late), *_bounds_around(clock, here), batch)

    def ingest(self, event: Mapping[str, Any], content_key: str, ts: float) -> None:
        """Count one decoded event with event time ``ts``, arriving within the window of the
        last :meth:`set_arrival`; raises :class:`RejectedError`.

        ``content_key`` identifies the record's exact content (a digest of its bytes): a
        record whose content was already counted in its period is a true duplicate (a
        producer retry, a redelivery) and is refused; a different record that reuses an
        event id is a different record and counts on its own (it can never displace another).
        """
        contribution: Contribution = self.extractor.contribution(event)
        j = self._place(ts, content_key)
        if self.units is not None and not self.units.admit(self._unit_of(event), j):
            raise UnitBoundDrop
        self.count(j, content_key, contribution)

    def _unit_of(self, event: Mapping[str, Any]) -> bytes:
        """The keyed digest of the event's privacy unit; :class:`RejectedError` when the
        field is missing or is not a non-empty text or integer identifier."""
        value = event.get(self._unit_field)
        if type(value) is int:
            value = str(value)
        if type(value) is not str or not 0 < len(value) <= MAX_ID_LENGTH:
            raise RejectedError(
                "schema_violation",
                f"field {self._unit_field!r} (the stream's privacy unit) must be a non-empty "
                f"text or integer identifier of at most {MAX_ID_LENGTH} characters",
            )
        return unit_digest(self._unit_key, value)

    def admits(self, ts: float, content_key: str) -> int | None:
        """The period an event with event time ``ts`` and this content key would count in, or
        None when :meth:`ingest` would refuse it for its time or as a duplicate (changes
        nothing; the native fast path asks this before counting, see
        :mod:`streamdp.engine.scanned_orders`)."""
        try:
            return self._place(ts, content_key)
        except RejectedError:
            return None

    def _place(self, ts: float, content_key: str) -> int:
        """The period of event time ``ts``, or :class:`RejectedError` when the acceptance
        window refuses it or its content was already counted there."""
        lo, hi, j = self._cache
        if not lo <= ts < hi:
            j = self.clock.index_of(ts)
            if j >= 0:
                lo, hi = self.clock.bounds(j)
                self._cache = (lo, hi, j)
        if j < 0:
            raise RejectedError("before_start", "event_time is before the stream's first period")
        if j < self.closed:
            raise RejectedError(
                "late",
                "its period was already released when the record was read: it reached the "
                "worker after the period's close instant (period end plus allowed_lateness) "
                "plus the worker's --delivery-allowance (keep the worker's lag below it), or "
                "an operator closed the period",
            )
        if j < self._time_lo:
            raise RejectedError(
                "late",
                "the record was sent at or after its period's public close instant (period end "
                "plus allowed_lateness) by its Kafka timestamp (by its receipt when it has "
                "none), or reached the worker more than the --delivery-allowance after it",
            )
        if self._stop and j >= self.horizon:
            raise RejectedError(
                "after_horizon",
                f"the stream released all {self.horizon} periods of its horizon and stops "
                "(on_epoch_end = 'stop')",
            )
        if j > self._future_hi:
            raise RejectedError(
                "too_far_in_future",
                f"event_time is more than max_future_periods = {self._max_future} periods "
                "after the period of the record's arrival on the public clock",
            )
        ids = self.seen.get(j)
        if ids is not None and content_key in ids:
            raise RejectedError(
                "duplicate_event",
                "a record with exactly this content was already counted in this period",
            )
        return j

    def count(self, j: int, content_key: str, contribution: Contribution) -> None:
        """Count an event placed in period ``j`` by :meth:`admits` (or :meth:`ingest`)."""
        ids = self.seen.get(j)
        if ids is None:
            ids = self.seen[j] = set()
            order = self.seen_order[j] = []
            row = self.counts[j] = [0] * self.width
        else:
            order = self.seen_order[j]
            row = self.counts[j]
        ids.add(content_key)
        order.append(content_key)
        for i, q in contribution:
            row[i] += q

    def counts_of(self, j: int) -> npt.NDArray[np.int64]:
        """The true counts of period ``j`` (zeros if nothing was counted in it), each taken
        as at most :data:`COUNT_LIMIT`."""
        row = self.counts.get(j)
        if row is None:
            return np.zeros(self.width, dtype=np.int64)
        if max(row, default=0) > COUNT_LIMIT:
            row = [min(count, COUNT_LIMIT) for count in row]
        return np.array(row, np.int64)

    def close(self, j: int) -> None:
        """Period ``j``, the oldest open one, is closed: forget its counts and content keys."""
        self.counts.pop(j, None)
        self.seen.pop(j, None)
        self.seen_order.pop(j, None)
        if self.units is not None:
            self.units.close_period(j)
        self.closed = j + 1

    def seen_ids(self) -> Mapping[int, Sequence[str]]:
        """The content keys counted so far in each open period, in counting order (restored
        ones first, sorted): a live view, read, never change. Keys are only appended while a
        period is open, and a period's entry goes when it closes, so a reader that stored the
        first ``n`` of a period stores ``ids[n:]`` next: O(new keys), however busy the period."""
        return self.seen_order

    def units_state(self, *, with_log: bool) -> dict[str, Any] | None:
        """The privacy unit's bookkeeping as plain state (None without a unit); without the
        admission log when the daemon stores it incrementally (:meth:`unit_log`)."""
        if self.units is None:
            return None
        state = self.units.state()
        if not with_log:
            del state["admitted"]
        return state

    def unit_log(self) -> Mapping[int, Sequence[bytes]]:
        """The privacy unit's admission log by period (a live view; empty without a unit)."""
        return {} if self.units is None else self.units.log()

    def restore_units(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`units_state` output (with its log); raises :class:`StateError`."""
        if self.units is None:
            if state is not None:
                raise StateError("the state holds privacy-unit bookkeeping the stream lacks")
            return
        if state is None:
            raise StateError(
                "the state holds no privacy-unit bookkeeping: it was written for a stream "
                "that protected one event"
            )
        self.units = UnitBookkeeping.from_state(
            self.units.unit,
            self.horizon,
            self.units.key_check,
            state,
            legacy_key_check=legacy_key_check(self._unit_key),
        )
        if self.units.closed != self.closed:
            raise StateError("privacy-unit state and the stream disagree on the periods closed")

    def restore(self, closed: int, counts: dict[int, list[int]], seen: dict[int, set[str]]) -> None:
        """Continue from a restored state: ``closed`` periods, the open ones' counts and keys."""
        self.closed = closed
        self.counts, self.seen = counts, seen
        self.seen_order = {j: sorted(ids) for j, ids in seen.items()}
        self._cache = (1.0, 0.0, -1)
