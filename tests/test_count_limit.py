"""A counter's count in one period is taken as at most ``COUNT_LIMIT`` (audit of 2026-11-28:
a count past 2^63 - 1 made every close of the stream raise ``OverflowError``, the same after
each restart, so enough records stopped the stream's releases for good).

- the clamp is a contraction: with ``q`` more of a counter, the count taken moves by at most
  ``q``, at every count around the limit (so every sensitivity holds);
- a period holding counts far past int64 closes and releases, the counter taken at the limit,
  the others as counted; the node sums of the longest horizon stay inside int64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamdp.engine import Engine
from streamdp.engine.open_periods import COUNT_LIMIT
from streamdp.engine.stream_table import MAX_HORIZON
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec


def _runtime() -> Any:
    spec = example_spec("restaurant")
    engine = Engine(spec, sampler=InsecureSeededSampler(0), batch=True)
    return engine.streams[next(iter(spec.streams))]


def test_the_limit_keeps_every_sensitivity_and_int64() -> None:
    rng = np.random.default_rng(3)
    for count in [0, 1, COUNT_LIMIT - 5, COUNT_LIMIT, COUNT_LIMIT + 1, 2**63, 2**70]:
        for q in [0, 1, 2, 5, int(rng.integers(1, 2**40))]:
            runtime = _runtime()
            periods = runtime.periods
            periods.count(0, "a", [(0, count)])
            before = int(periods.counts_of(0)[0])
            periods.count(0, "b", [(0, q)])
            after = int(periods.counts_of(0)[0])
            assert 0 <= after - before <= q
            assert after <= COUNT_LIMIT
    assert COUNT_LIMIT * MAX_HORIZON < 2**63  # the longest horizon's node sums fit int64


def test_a_period_past_int64_closes_and_releases() -> None:
    runtime = _runtime()
    periods = runtime.periods
    periods.count(0, "k1", [(0, 2**62), (1, 3)])
    periods.count(0, "k2", [(0, 2**62)])  # 2^63: one past int64
    counts = periods.counts_of(0)
    assert counts[0] == COUNT_LIMIT
    assert counts[1] == 3
    released = runtime.close_next()
    assert released  # the period's releases, from the counts taken
