"""The BLT counter under zCDP (issue 27): its working state is O(buffers) per counter whatever
the horizon, a restore (from the full state, or from the daemon's node-less state plus the
stored noisy values) continues bit for bit, epochs carry, the declared variance holds in
simulation (power check), and the spec accepts it under zCDP only."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pytest
from stats_continual import P_THRESHOLD, variance_z_pvalue

from streamdp.continual.bank import open_bank, restore_bank
from streamdp.continual.blt_counter import BltCounter, blt_strategy
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.engine import parse_spec
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler

BUDGET = GaussianBudget(Fraction(1, 2), 5)


def _counter(horizon: int, seed: int, width: int = 3, label: str = "s") -> BltCounter:
    bank = open_bank(
        blt_strategy(horizon), 7.29, 5.0, width, InsecureSeededSampler(seed),
        noise_label=label, gaussian=BUDGET,
    )  # fmt: skip
    assert isinstance(bank, BltCounter)
    return bank


def _hot_size(counter: BltCounter) -> int:
    return len(json.dumps(counter.state(with_nodes=False)))


def test_the_working_state_does_not_grow_with_the_horizon_or_the_periods() -> None:
    sizes = {}
    for horizon in (64, 4095):
        counter = _counter(horizon, 1)
        for _ in range(20):
            counter.close_period(np.array([5, 7, 9], dtype=np.int64))
        sizes[horizon] = _hot_size(counter)
        for _ in range(20):
            counter.close_period(np.array([5, 7, 9], dtype=np.int64))
        # 20 more periods: the same numbers of buffers (digits may grow, not the count)
        assert abs(_hot_size(counter) - sizes[horizon]) < 200
    assert abs(sizes[64] - sizes[4095]) < 300
    assert blt_strategy(4095).state_values_per_counter == 7


@pytest.mark.parametrize("cut", [1, 7, 16])
def test_restore_continues_bit_for_bit_from_either_state(cut: int) -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 1000, size=(16 * 2, 3))
    reference = _counter(16, 8)
    expected = []
    for t in range(32):
        if reference.periods_closed == 16:
            reference = reference.next_epoch()
        release = reference.close_period(counts[t])
        expected.append((release.noisy_count.tolist(), release.noisy_total.tolist()))
    for full in (True, False):
        first = _counter(16, 8)
        got = []
        for t in range(cut):
            release = first.close_period(counts[t])
            got.append((release.noisy_count.tolist(), release.noisy_total.tolist()))
        state = json.loads(json.dumps(first.state(with_nodes=full)))
        if not full:  # the daemon puts the stored noisy values back
            state["noisy_nodes"] = [v.tolist() for v in first.nodes_from(0)]
        second = restore_bank(state, InsecureSeededSampler(8))
        for t in range(cut, 32):
            if second.periods_closed == 16:
                second = second.next_epoch()
            release = second.close_period(counts[t])
            got.append((release.noisy_count.tolist(), release.noisy_total.tolist()))
        assert got == expected
        # a stored noisy value is used instead of drawing
        assert second.released(1)[1].shape == (16, 3)


def test_released_recomputes_exactly_what_was_published() -> None:
    counter = _counter(16, 4)
    totals = [
        counter.close_period(np.full(3, t, dtype=np.int64)).noisy_total.tolist() for t in range(10)
    ]
    assert counter.released(1)[1].tolist() == totals


def test_declared_variance_holds_in_simulation() -> None:
    horizon, width, trials = 16, 3, 2500
    noise = np.empty((horizon, trials * width))
    for trial in range(trials):
        counter = _counter(horizon, 10_000 + trial, width, label="")
        for t in range(horizon):
            release = counter.close_period(np.zeros(width, dtype=np.int64))
            noise[t, trial * width : (trial + 1) * width] = release.noisy_total
    probe = _counter(horizon, 0, width)
    for t in (1, 8, 16):
        declared = probe.total_variance(t)
        assert variance_z_pvalue(noise[t - 1], declared) > P_THRESHOLD
        assert variance_z_pvalue(noise[t - 1], 1.3 * declared) < P_THRESHOLD


SPEC = """
[sources.s]
topic = "t"
kind = "person"
{cap}

[streams.f]
source = "s"
{privacy}
mechanism = "blt"
sensitivity = 1
horizon = 365
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}
"""


def test_the_spec_takes_blt_under_zcdp_only() -> None:
    spec = parse_spec(
        SPEC.format(cap="rho_cap = 0.5", privacy='privacy = { definition = "zcdp", rho = 0.5 }')
    )
    assert spec.streams["f"].mechanism == "blt"
    with pytest.raises(ConfigError, match=re.escape("blt (a matrix factorization")):
        parse_spec(SPEC.format(cap="epsilon_cap = 1", privacy="epsilon = 1"))
    with pytest.raises(ConfigError, match="takes 'total' or 'minimax'"):
        parse_spec(
            SPEC.format(
                cap="rho_cap = 0.5",
                privacy='privacy = { definition = "zcdp", rho = 0.5 }\nobjective = "count"',
            )
        )
