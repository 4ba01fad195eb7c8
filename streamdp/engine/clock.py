"""The public clock that closes periods (DESIGN §5): a function of wall time, never of data.

Three kinds, all public (an attacker who controls records cannot move any of them):

``wall``                                     the worker's wall clock (production)
``frozen:<instant>``                         stands at one instant: periods close only on an
                                             operator's close control record (tests, backfills)
``simulated:<instant>@<anchor>x<rate>``      ``instant + rate * (wall - anchor)``: simulated time
                                             running ``rate`` times faster than the wall clock
                                             from the wall instant ``anchor`` (Unix seconds);
                                             the demo's clock, shared by its producers

The engine keeps the clock monotone (a reading below the last one changes nothing), so a wall
clock stepped back by NTP, or a restart on a machine whose clock lags, never reopens a period.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamdp.engine.periods import format_instant, parse_instant
from streamdp.errors import ConfigError

CLOCK_FORMS = (
    "wall | frozen:<RFC 3339 instant> | simulated:<RFC 3339 instant>@<unix seconds>x<rate>"
)


@dataclass(frozen=True)
class PublicClock:
    """``now() = origin + rate * (wall() - anchor)``; the wall clock is origin 0, rate 1."""

    origin: float = 0.0
    anchor: float = 0.0
    rate: float = 1.0
    wall: Callable[[], float] = time.time

    def now(self) -> float:
        """The clock's reading (seconds since the Unix epoch)."""
        return self.at(self.wall())

    def at(self, wall: float) -> float:
        """The clock's reading at wall-clock instant ``wall`` (Unix seconds)."""
        return self.origin + self.rate * (wall - self.anchor)

    def wall_at(self, reading: float) -> float:
        """The wall-clock instant at which the clock reads ``reading`` (inf: never, a frozen
        clock past it or a reading of inf; -inf: a reading of -inf)."""
        if math.isinf(reading):
            return reading
        if self.rate == 0.0:
            return -math.inf if reading <= self.origin else math.inf
        return self.anchor + (reading - self.origin) / self.rate

    def describe(self) -> str:
        """The clock in the text form :func:`parse_clock` reads."""
        if self.rate == 1.0 and self.origin == self.anchor:
            return "wall"
        if self.rate == 0.0:
            return f"frozen:{format_instant(self.origin)}"
        return f"simulated:{format_instant(self.origin)}@{self.anchor!r}x{self.rate!r}"


def parse_clock(text: str) -> PublicClock:
    """A :class:`PublicClock` from its text form (see the module docstring)."""
    value = text.strip()
    if value == "wall":
        return PublicClock()
    kind, _, rest = value.partition(":")
    if kind == "frozen":
        instant = parse_instant(rest) if rest and not _is_number(rest) else None
        if instant is None:
            raise ConfigError(f"--clock {text!r}: frozen needs an RFC 3339 instant; {CLOCK_FORMS}")
        return PublicClock(origin=instant, anchor=0.0, rate=0.0)
    if kind == "simulated":
        instant_text, _, tail = rest.rpartition("@")
        anchor_text, _, rate_text = tail.partition("x")
        instant = parse_instant(instant_text) if not _is_number(instant_text) else None
        try:
            anchor, rate = float(anchor_text), float(rate_text)
        except ValueError:
            anchor = rate = math.nan
        if instant is None or not math.isfinite(anchor) or not (math.isfinite(rate) and rate > 0):
            raise ConfigError(
                f"--clock {text!r}: simulated needs <RFC 3339 instant>@<unix seconds>x<rate > 0>; "
                f"{CLOCK_FORMS}"
            )
        return PublicClock(origin=instant, anchor=anchor, rate=rate)
    raise ConfigError(f"--clock {text!r} is not a clock; {CLOCK_FORMS}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
