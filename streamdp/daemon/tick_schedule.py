"""When the worker's tick runs: a function of the public clock and the worker's start alone.

The tick is the only step that closes periods (:meth:`ReleaseService.tick
<streamdp.daemon.service.ReleaseService.tick>`), so its instants are the moments releases are
published. Each tick has a *scheduled* wall-clock instant, which is also the timestamp its
releases carry, and the public clock's reading at that instant, which decides what closes:

- a heartbeat on the grid of whole multiples of ``step`` seconds (``--tick``) of wall time,
  which starts the sources of newly assigned partitions and makes an operator's close;
- the wall instant of the next close instant (a period's end plus its allowed lateness) plus
  the delivery allowance (``--delivery-allowance``), when it comes before the next heartbeat:
  a period is published exactly that long after its close instant, once the records sent
  (Kafka-timestamped) before it have had that long to arrive;
- while some period is still due after a tick (the backlog after downtime), the next grid
  point: ``pace`` periods per stream per ``step`` seconds, a catch-up pace set by the clock.

Nothing here reads an input batch. A tick delayed behind a batch runs late, but with the
instant it was scheduled for, and the next one is scheduled from that instant, so neither what
closes nor the timestamps depend on the input's volume or timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from streamdp.engine.clock import PublicClock

__all__ = ["ScheduledTick", "first_tick", "next_tick"]


@dataclass(frozen=True)
class ScheduledTick:
    """One tick: ``wall``, its scheduled wall-clock instant (Unix seconds; the timestamp of
    its releases); ``reading``, the public clock's reading it closes at (its reading at
    ``wall`` minus the delivery allowance); ``received``, the clock's reading at ``wall``
    (records received before it are processed before the tick closes anything)."""

    wall: float
    reading: float
    received: float


def _grid_after(wall: float, step: float) -> float:
    """The first whole multiple of ``step`` strictly after ``wall``."""
    point = (math.floor(wall / step) + 1) * step
    while point <= wall:  # float rounding at a grid point
        point += step
    return point


def _at(clock: PublicClock, wall: float, allowance: float) -> ScheduledTick:
    return ScheduledTick(wall, clock.at(wall - allowance), clock.at(wall))


def first_tick(
    clock: PublicClock, step: float, wall_now: float, allowance: float = 0.0
) -> ScheduledTick:
    """The worker's first tick: the first grid point after ``wall_now`` (its start)."""
    return _at(clock, _grid_after(wall_now, step), allowance)


def next_tick(
    clock: PublicClock,
    step: float,
    last: ScheduledTick,
    *,
    behind: bool,
    next_close: float,
    allowance: float = 0.0,
) -> ScheduledTick:
    """The tick after ``last``. ``behind``: some period was still due at ``last.reading``
    after it ran (a backlog); ``next_close``: the earliest close instant on the public clock
    of any loaded source (inf: none); ``allowance``: the delivery allowance, wall seconds
    between a close instant and the tick that releases it."""
    grid = _grid_after(last.wall, step)
    if behind:
        return _at(clock, grid, allowance)
    at_close = clock.wall_at(next_close) + allowance
    if last.wall < at_close < grid:
        return ScheduledTick(at_close, next_close, clock.at(at_close))
    return _at(clock, grid, allowance)
