"""Shared helpers for the engine tests: drive an engine over lines, collect outputs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from streamdp.engine import ConsistentRecord, DeadLetterRecord, Engine, ReleaseRecord


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


def drive(engine: Engine, lines: Iterable[str | bytes]) -> tuple[list[Any], list[DeadLetterRecord]]:
    """Feed lines like the replay does; return (releases + consistent records, dead letters)."""
    outputs: list[Any] = []
    letters: list[DeadLetterRecord] = []
    for line in lines:
        result = engine.ingest(line)
        letters.extend(result.dead_letters)
        outputs.extend(result.outputs)
        if result.event_time is not None:
            outputs.extend(engine.advance_watermark(result.event_time, source=result.source))
    return outputs, letters


def releases(outputs: Iterable[Any]) -> list[ReleaseRecord]:
    return [r for r in outputs if isinstance(r, ReleaseRecord)]


def consistent(outputs: Iterable[Any]) -> list[ConsistentRecord]:
    return [r for r in outputs if isinstance(r, ConsistentRecord)]
