"""``streamdp replay --check-input``: what a replay of a file would count, before spending anything.

A replay never refuses a file for what its records look like (that would let one record decide
whether anything is published: :mod:`streamdp.engine.replay_input`), so the way to catch a CSV
file or a file of the wrong stream before the budget is spent is to check it first. The check
judges every line exactly as the replay would (the same engine, batch mode, the same ``as_of``)
and closes nothing: no noise is drawn, no budget spent, nothing written. Its report is derived
from raw records (how many, and why rejected): it belongs on the operator's terminal, protected
like the input, never on a public surface.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from streamdp.engine.engine import Engine
from streamdp.engine.ledger import MemoryLedgerBackend
from streamdp.engine.replay import ingest_lines
from streamdp.engine.replay_input import events_start, first_line_hint
from streamdp.engine.spec import EngineSpec
from streamdp.errors import ConfigError


@dataclass
class InputCheck:
    """What a replay of the file would count (raw input volume: protected)."""

    path: str
    lines: int = 0
    accepted: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    dropped_over_unit_bound: dict[str, int] = field(default_factory=dict)
    hint: str | None = None

    def render(self) -> str:
        rejected = sum(self.rejected_by_reason.values())
        lines = [
            (
                f"input check of {self.path!r} (counts derived from the raw records: keep them "
                "off public surfaces); nothing spent, nothing written"
            ),
            f"lines read: {self.lines}",
            f"events a replay would count: {self.accepted}",
            f"dead letters it would write: {rejected} (one per stream refusing a record)",
        ]
        lines += [f"  {reason}: {n}" for reason, n in sorted(self.rejected_by_reason.items())]
        lines += [
            f"records dropped beyond the privacy unit's bounds in {name}: {n}"
            for name, n in sorted(self.dropped_over_unit_bound.items())
            if n
        ]
        if self.hint is not None:
            lines.append(f"looks wrong: {self.hint}")
        if self.accepted == 0:
            lines.append(
                "no event would count: a replay of this file would spend the budget on releases "
                "of noise alone"
            )
        return "\n".join(lines)


class _NoDraws:
    """The sampler of a check: a check closes nothing, so any draw is a bug."""

    name = "none (input check)"
    secure = True

    def discrete_laplace(
        self,
        scale: float,  # noqa: ARG002 (the sampler protocol's signature)
        size: int,  # noqa: ARG002
        *,
        label: str = "",
    ) -> npt.NDArray[np.int64]:
        raise AssertionError(f"an input check drew noise ({label!r}): it must close nothing")


def check_input(
    spec: EngineSpec, input_path: str | Path, *, as_of: float, unit_key: bytes | None = None
) -> InputCheck:
    """Judge every line of ``input_path`` as a replay at ``as_of`` would, closing nothing."""
    source = Path(input_path)
    if not source.is_file():
        raise ConfigError(f"--input {str(source)!r} is not a readable file")
    start = events_start(source)
    engine = Engine(
        spec,
        sampler=_NoDraws(),
        ledger_backend=MemoryLedgerBackend(),
        batch=True,
        unit_key=unit_key if unit_key is not None else secrets.token_bytes(32),
        stores_nodes=False,
    )
    engine.start_batch(as_of)
    check = InputCheck(path=str(source), hint=first_line_hint(source, start))
    with source.open("rb") as handle:
        handle.seek(start)
        check.lines = ingest_lines(engine, handle).lines
    check.accepted = engine.stats.events_accepted
    check.rejected_by_reason = dict(engine.stats.rejected_by_reason)
    check.dropped_over_unit_bound = dict(engine.stats.dropped_over_unit_bound)
    return check
