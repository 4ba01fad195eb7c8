"""Shared helpers for the engine tests: drive an engine over lines, collect outputs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from streamdp.engine import ConsistentRecord, DeadLetterRecord, Engine, ReleaseRecord
from streamdp.engine.periods import parse_instant


class CountingSampler:
    """Wraps a sampler and counts calls and values drawn (to prove nothing is redrawn)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.secure = inner.secure
        self.calls = 0
        self.values = 0

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        self.calls += 1
        self.values += size
        return self.inner.discrete_laplace(scale, size, label=label)


class ConstantSampler:
    """Test sampler whose every draw is ``offset`` (makes raw counts recognisable)."""

    name = "test-constant"
    secure = False

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        return np.full(size, self.offset, dtype=np.int64)


def drive(
    engine: Engine, lines: Iterable[str | bytes], *, as_of: float | None = None
) -> tuple[list[Any], list[DeadLetterRecord]]:
    """Feed lines like the replay does (one batch), then advance the public clock to ``as_of``
    (default: the latest event time among the lines, a test convenience); return (releases +
    consistent records, dead letters)."""
    outputs: list[Any] = []
    letters: list[DeadLetterRecord] = []
    latest = float("-inf")
    for line in lines:
        result = engine.ingest(line)
        letters.extend(result.dead_letters)
        outputs.extend(result.outputs)
        if result.accepted:
            latest = max(latest, latest_time(line))
    outputs.extend(engine.advance_clock(latest if as_of is None else as_of))
    return outputs, letters


def drive_clocked(
    engine: Engine, lines: Iterable[str | bytes], arrivals: Iterable[float]
) -> tuple[list[Any], list[DeadLetterRecord]]:
    """Stream mode, like the daemon: before each line the public clock is advanced to that
    line's arrival instant (the test's clock); return (outputs, dead letters)."""
    outputs: list[Any] = []
    letters: list[DeadLetterRecord] = []
    for line, arrival in zip(lines, arrivals, strict=True):
        outputs.extend(engine.advance_clock(arrival))
        result = engine.ingest(line)
        letters.extend(result.dead_letters)
        outputs.extend(result.outputs)
    return outputs, letters


def arrivals_following(lines: Iterable[Any]) -> list[float]:
    """A test clock that follows the data: each synth line arrives at the latest event time
    of the good lines so far (an operator's schedule chosen in advance, the same for every
    run it is compared with)."""
    out: list[float] = []
    latest = float("-inf")
    for line in lines:
        if line.expect is None:
            latest = max(latest, latest_time(line.text))
        out.append(latest)
    return out


def latest_time(line: str | bytes) -> float:
    """The event time of a JSON line (-inf if it has none)."""
    try:
        value = parse_instant(json.loads(line).get("event_time"))
    except (ValueError, AttributeError):
        return float("-inf")
    return float("-inf") if value is None else value


def releases(outputs: Iterable[Any]) -> list[ReleaseRecord]:
    return [r for r in outputs if isinstance(r, ReleaseRecord)]


def consistent(outputs: Iterable[Any]) -> list[ConsistentRecord]:
    return [r for r in outputs if isinstance(r, ConsistentRecord)]
