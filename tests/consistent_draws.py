"""Shared by the budget-group tests (places levels, census attributes): a replay of generated
lines, and the check that a stream's declared consistent stds hold over many noise draws."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from streamdp.engine import Engine, EngineSpec
from streamdp.engine.records import ConsistentRecord
from streamdp.engine.replay import replay
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import release_instant


def replay_lines(spec: EngineSpec, lines: list[str], periods: int, tmp: Path, seed: int) -> Path:
    """Replay ``lines`` released at the close of ``periods`` periods with seeded noise
    ``seed``; returns the output folder."""
    tmp.mkdir(parents=True, exist_ok=True)
    events = tmp / "events.jsonl"
    events.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    replay(
        spec, events, tmp / "out", as_of=release_instant(spec, periods),
        sampler=InsecureSeededSampler(seed),
    )  # fmt: skip
    return tmp / "out"


def consistent_noise_draws(spec: EngineSpec, draws: int, first_seed: int) -> tuple[Any, ...]:
    """Consistent period-3 counts and totals of ``draws`` noise draws with no events (the
    values are the consistent noise; revised every 3 periods), and their declared stds:
    ``(counts, totals, count_std, total_std)``, arrays (draws, width) and (width,)."""
    spec = replace(
        spec,
        streams={
            n: replace(s, consistency=replace(s.consistency, every_periods=3))
            for n, s in spec.streams.items()
        },
    )
    counts, totals = [], []
    declared: ConsistentRecord | None = None
    for seed in range(draws):
        engine = Engine(spec, sampler=InsecureSeededSampler(first_seed + seed))
        records = engine.advance_clock(release_instant(spec, 3))
        third = next(r for r in records if isinstance(r, ConsistentRecord) and r.period == 3)
        counts.append(list(third.counts.values()))
        totals.append(list(third.totals.values()))
        declared = third
    assert declared is not None
    return (
        np.asarray(counts),
        np.asarray(totals),
        np.asarray(list(declared.count_std.values())),
        np.asarray(list(declared.total_std.values())),
    )


def stds_hold(draws: tuple[Any, ...], scale: float) -> list[bool]:
    """Per counter, for the counts then the totals of :func:`consistent_noise_draws`: whether
    the sum of squared values standardised by ``scale`` times the declared std is within a
    normal bound at p = 1e-6 (Bonferroni over counters, the spread from the sample's fourth
    moment)."""
    counts, totals, count_std, total_std = draws
    n = counts.shape[0]
    verdicts = []
    for values, std in ((counts, count_std), (totals, total_std)):
        z = values / (std * scale)
        for column in z.T:
            statistic = float(np.sum(column**2))
            spread = np.sqrt(n * max(float(np.mean(column**4)) - 1.0, 1e-9))
            bound = stats.norm.isf(1e-6 / (2 * 2 * z.shape[1])) * spread
            verdicts.append(abs(statistic - n) <= bound)
    return verdicts
