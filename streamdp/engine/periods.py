"""Periods: mapping event time (seconds since the Unix epoch) to absolute period indices.

Absolute index j = 0, 1, 2, ... counts periods from the stream's start; with horizon N the
period is number ``j % N + 1`` of epoch ``j // N``. Calendar periods (day, month) are local to an
IANA time zone and follow its daylight-saving changes (a day may last 23 or 25 hours); fixed
periods all last ``length_seconds``.

Instants are supported from :data:`EARLIEST_INSTANT` (year 1000) to :data:`LATEST_INSTANT`
(year 9000): :func:`parse_instant` returns None outside (the engine refuses the record as
``bad_timestamp``), which leaves room for time zones and for the end of the last period within
Python's calendar (years 1-9999). The clock's methods are total: they never raise for any float
or index; arguments beyond the supported range are clamped to it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Final
from zoneinfo import ZoneInfo

from streamdp.engine.spec import PeriodSpec

_UTC = dt.UTC

#: First instant an event or control record may name (1000-01-01T00:00:00Z), seconds.
EARLIEST_INSTANT: Final = dt.datetime(1000, 1, 1, tzinfo=_UTC).timestamp()
#: Last instant an event or control record may name (9000-01-01T00:00:00Z), seconds.
LATEST_INSTANT: Final = dt.datetime(9000, 1, 1, tzinfo=_UTC).timestamp()
#: Instants Python's calendar can show in any time zone (a day inside years 1 and 9999).
_SHOWABLE_FIRST: Final = dt.datetime(1, 1, 2, tzinfo=_UTC).timestamp()
_SHOWABLE_LAST: Final = dt.datetime(9999, 12, 30, tzinfo=_UTC).timestamp()


def _clamped(ts: float, low: float, high: float) -> float:
    """``ts`` within ``[low, high]``; NaN becomes ``low``."""
    if ts >= low:
        return min(ts, high)
    return low


class PeriodClock:
    """``index_of(ts)`` and ``bounds(j)`` for one :class:`PeriodSpec` (pure, no state)."""

    def __init__(self, spec: PeriodSpec) -> None:
        self.spec = spec
        self._unit = spec.unit
        if spec.unit == "fixed":
            self._start_ts = dt.datetime.fromisoformat(spec.start).timestamp()
            self._length = float(spec.length_seconds)
            self._tz: ZoneInfo | None = None
        else:
            self._tz = ZoneInfo(spec.timezone)
            self._date0 = dt.date.fromisoformat(spec.start)
            self._start_ts = self._midnight(self._date0)
        # the indices bounds() accepts: those of the supported instants, and one more
        self._lowest = self._index(EARLIEST_INSTANT)
        self._highest = self._index(LATEST_INSTANT) + 1

    def _midnight(self, day: dt.date) -> float:
        return dt.datetime(day.year, day.month, day.day, tzinfo=self._tz).timestamp()

    def _index(self, ts: float) -> int:
        """Period index of ``ts`` (within the supported instants), counting back before the
        start as well: the ``j`` whose :meth:`bounds` hold ``ts``, exactly.

        The calendar (or the division) gives a candidate; ``datetime`` rounds an instant to
        the microsecond, and float division can round too, so within half a microsecond of a
        boundary the candidate can be one off. The boundaries themselves decide, so that
        ``bounds(index_of(ts))`` always holds ``ts`` and a period cached by its bounds (the
        engine keeps the last one) gives the same answer as a fresh ``index_of``: no record's
        period, or acceptance window, depends on the record looked at before it."""
        if self._unit == "fixed":
            j = int((ts - self._start_ts) // self._length)
        else:
            local = dt.datetime.fromtimestamp(ts, self._tz)
            if self._unit == "day":
                j = (local.date() - self._date0).days
            else:
                j = (local.year - self._date0.year) * 12 + (local.month - self._date0.month)
        start, end = self._span(j)
        if ts < start:
            return j - 1
        if ts >= end:
            return j + 1
        return j

    def index_of(self, ts: float) -> int:
        """Absolute 0-based period index of instant ``ts`` (negative before the start; NaN is
        before the start; instants beyond the supported range count as its edges)."""
        if not ts >= self._start_ts:  # also NaN
            return -1
        return self._index(min(ts, LATEST_INSTANT))

    def bounds(self, index: int) -> tuple[float, float]:
        """``[start, end)`` of absolute period ``index`` in seconds since the Unix epoch
        (indices beyond those of the supported instants are clamped to them)."""
        return self._span(min(max(index, self._lowest), self._highest))

    def _span(self, index: int) -> tuple[float, float]:
        if self._unit == "fixed":
            # each end computed as the next period's start, so the periods tile with no gap
            return (
                self._start_ts + index * self._length,
                self._start_ts + (index + 1) * self._length,
            )
        if self._unit == "day":
            day = self._date0 + dt.timedelta(days=index)
            return self._midnight(day), self._midnight(day + dt.timedelta(days=1))
        return self._midnight(self._month(index)), self._midnight(self._month(index + 1))

    def _month(self, index: int) -> dt.date:
        months = self._date0.year * 12 + (self._date0.month - 1) + index
        return dt.date(months // 12, months % 12 + 1, 1)

    def iso(self, ts: float) -> str:
        """RFC 3339 text of ``ts`` in the stream's time zone (UTC for fixed periods); instants
        Python's calendar cannot show (beyond years 1-9999, NaN) are clamped into it."""
        shown = _clamped(ts, _SHOWABLE_FIRST, _SHOWABLE_LAST)
        return dt.datetime.fromtimestamp(shown, self._tz or _UTC).isoformat()


#: The date-time text an event may carry: ``schemas/person_event.schema.json``'s pattern (RFC
#: 3339 with ``T``, ``t`` or a space, seconds optional, ``Z``/``z`` or an offset with or without
#: its colon). Not ``fromisoformat`` alone, which also takes ISO 8601 week dates, basic formats
#: and hour-only times, and refused the lowercase ``z`` the schema allows (an audit).
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})", re.ASCII
)


def parse_instant(value: object) -> float | None:
    """Seconds since the Unix epoch from an RFC 3339 string with offset or a number of seconds.

    Returns None for anything else (naive times, bools, non-finite numbers, bad text) and for
    instants outside ``[EARLIEST_INSTANT, LATEST_INSTANT]``; never raises.
    """
    if isinstance(value, str):
        if _RFC3339.fullmatch(value) is None:  # Python's ISO 8601 takes week dates and more
            return None
        try:
            parsed = dt.datetime.fromisoformat(value.upper())
            if parsed.tzinfo is None:
                return None
            number = parsed.timestamp()
        except (ValueError, OverflowError):  # bad text; year 1 or 9999 shifted by its offset
            return None
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            return None
        if not math.isfinite(number):
            return None
    else:
        return None
    if not EARLIEST_INSTANT <= number <= LATEST_INSTANT:
        return None
    return number


def format_instant(ts: float) -> str:
    """RFC 3339 UTC text of ``ts`` (clamped into years 1-9999 like :meth:`PeriodClock.iso`)."""
    shown = _clamped(ts, _SHOWABLE_FIRST, _SHOWABLE_LAST)
    return dt.datetime.fromtimestamp(shown, _UTC).isoformat().replace("+00:00", "Z")
