"""The counter-bank interface both counter kinds satisfy (streamdp.continual.bank).

- the factored (k-ary) counter draws its epoch's noise at the first close, never at
  construction or restore, and adopts stored noise instead of drawing;
- its state can leave the noise out (the daemon stores it apart), and a state whose noise was
  drawn refuses to restore without it (never a redraw);
- ``released(first)`` recomputes exactly what ``close_period`` returned, for both kinds;
- a projection applies to the k-ary noise only.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_engine_support import CountingSampler

from streamdp.continual.bank import open_bank, restore_bank
from streamdp.continual.kary_optimise import optimise
from streamdp.continual.strategy import build_strategy
from streamdp.errors import ConfigError, StateError
from streamdp.noise import InsecureSeededSampler

COUNTS = np.random.default_rng(3).integers(0, 20, size=(30, 2))


def _kary(mechanism: str = "kary_gls"):  # type: ignore[no-untyped-def]
    return optimise(mechanism, "total", 30, 4)


def test_noise_is_drawn_at_the_first_close_not_before() -> None:
    sampler = CountingSampler(InsecureSeededSampler(1))
    bank = open_bank(_kary(), 1.0, 1.0, 2, sampler, noise_label="s")
    assert sampler.calls == 0
    assert bank.epoch_noise() is None
    restored = restore_bank(json.loads(json.dumps(bank.state())), sampler)
    assert sampler.calls == 0  # an engine that only restores draws nothing
    bank.close_period(COUNTS[0])
    assert sampler.calls == _kary().levels  # one call per level, the whole epoch
    noise = bank.epoch_noise()
    assert noise is not None
    assert noise.shape == (_kary().node_count, 2)
    for t in range(1, 5):
        bank.close_period(COUNTS[t])
    assert sampler.calls == _kary().levels
    # the restored copy adopts the stored noise and releases the same values, drawing nothing
    restored.adopt_noise(noise)
    again = [restored.close_period(COUNTS[t]).noisy_total for t in range(5)]
    np.testing.assert_array_equal(again[-1], bank.released(5)[1][0])
    assert sampler.calls == _kary().levels
    with pytest.raises(StateError, match="already has its node noise"):
        restored.adopt_noise(noise)
    with pytest.raises(StateError, match="shape"):
        open_bank(_kary(), 1.0, 1.0, 2, sampler).adopt_noise(noise[:-1])


def test_a_state_without_its_drawn_noise_is_refused_not_redrawn() -> None:
    sampler = CountingSampler(InsecureSeededSampler(2))
    bank = open_bank(_kary(), 1.0, 1.0, 2, sampler)
    bank.close_period(COUNTS[0])
    full = json.loads(json.dumps(bank.state()))
    slim = json.loads(json.dumps(bank.state(with_noise=False)))
    assert slim["node_noise"] is None
    assert slim["noise_drawn"]
    assert len(full["node_noise"]) == _kary().node_count
    calls = sampler.calls
    with pytest.raises(StateError, match="noise is missing"):
        restore_bank(slim, sampler)
    assert sampler.calls == calls
    slim["node_noise"] = full["node_noise"]
    restored = restore_bank(slim, sampler)
    np.testing.assert_array_equal(restored.close_period(COUNTS[1]).noisy_total,
                                  bank.close_period(COUNTS[1]).noisy_total)  # fmt: skip


@pytest.mark.parametrize("mechanism", ["kary_gls", "kary_digits", "fda", "naive"])
def test_released_recomputes_what_each_close_returned(mechanism: str) -> None:
    strategy = (
        _kary(mechanism) if mechanism.startswith("kary") else build_strategy(mechanism, "total", 30)
    )
    bank = open_bank(strategy, 1.0, 1.0, 2, InsecureSeededSampler(5))
    counts, totals = [], []
    for t in range(30):
        release = bank.close_period(COUNTS[t])
        counts.append(release.noisy_count)
        totals.append(release.noisy_total)
    bank2 = bank.next_epoch()  # carries the total: the next epoch's releases include it
    for first in (1, 7, 30):
        got_counts, got_totals = bank.released(first)
        np.testing.assert_array_equal(got_counts, np.stack(counts[first - 1 :]))
        np.testing.assert_array_equal(got_totals, np.stack(totals[first - 1 :]))
    assert bank.released(31)[0].shape == (0, 2)
    release = bank2.close_period(COUNTS[0])
    np.testing.assert_array_equal(bank2.released(1)[1][0], release.noisy_total)
    assert bank2.integral_releases == bank.integral_releases == (mechanism != "kary_gls")


def test_a_projection_applies_to_kary_noise_only() -> None:
    projection = np.full((2, 2), 0.5)  # onto span{(1, 1)}
    bank = open_bank(_kary(), 1.0, 1.0, 2, InsecureSeededSampler(6), projection=projection)
    same = np.array([3, 3])
    release = bank.close_period(same)
    assert release.noisy_total[0] == pytest.approx(release.noisy_total[1], abs=1e-9)
    assert not bank.integral_releases
    np.testing.assert_allclose(bank.variance_factors, [0.5, 0.5])  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="revisions"):
        open_bank(build_strategy("fda", "total", 30), 1.0, 1.0, 2, InsecureSeededSampler(6),
                  projection=projection)  # fmt: skip
