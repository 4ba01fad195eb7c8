"""Periods: mapping event time (seconds since the Unix epoch) to absolute period indices.

Absolute index j = 0, 1, 2, ... counts periods from the stream's start; with horizon N the
period is number ``j % N + 1`` of epoch ``j // N``. Calendar periods (day, month) are local to an
IANA time zone and follow its daylight-saving changes (a day may last 23 or 25 hours); fixed
periods all last ``length_seconds``.
"""

from __future__ import annotations

import datetime as dt
import math
from zoneinfo import ZoneInfo

from streamdp.engine.spec import PeriodSpec

_UTC = dt.UTC


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

    def _midnight(self, day: dt.date) -> float:
        return dt.datetime(day.year, day.month, day.day, tzinfo=self._tz).timestamp()

    def index_of(self, ts: float) -> int:
        """Absolute 0-based period index of instant ``ts`` (negative before the start)."""
        if self._unit == "fixed":
            return int((ts - self._start_ts) // self._length)
        if ts < self._start_ts:
            return -1
        local = dt.datetime.fromtimestamp(ts, self._tz)
        if self._unit == "day":
            return (local.date() - self._date0).days
        return (local.year - self._date0.year) * 12 + (local.month - self._date0.month)

    def bounds(self, index: int) -> tuple[float, float]:
        """``[start, end)`` of absolute period ``index`` in seconds since the Unix epoch."""
        if self._unit == "fixed":
            start = self._start_ts + index * self._length
            return start, start + self._length
        if self._unit == "day":
            day = self._date0 + dt.timedelta(days=index)
            return self._midnight(day), self._midnight(day + dt.timedelta(days=1))
        return self._midnight(self._month(index)), self._midnight(self._month(index + 1))

    def _month(self, index: int) -> dt.date:
        months = self._date0.year * 12 + (self._date0.month - 1) + index
        return dt.date(months // 12, months % 12 + 1, 1)

    def iso(self, ts: float) -> str:
        """RFC 3339 text of ``ts`` in the stream's time zone (UTC for fixed periods)."""
        return dt.datetime.fromtimestamp(ts, self._tz or _UTC).isoformat()


def parse_instant(value: object) -> float | None:
    """Seconds since the Unix epoch from an RFC 3339 string with offset or a number of seconds.

    Returns None for anything else (naive times, bools, non-finite numbers, bad text).
    """
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return None
        return parsed.timestamp()
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            return None
        return number
    return None


def format_instant(ts: float) -> str:
    """RFC 3339 UTC text of ``ts``."""
    return dt.datetime.fromtimestamp(ts, _UTC).isoformat().replace("+00:00", "Z")
