"""The tree counter under rho-zCDP (issue 27): discrete Gaussian node noise whose sigmas meet
the budget exactly on every period, declared variances that match a simulation (with a power
check), neighbouring inputs that give identical releases under the coupled noise, and a state
that restores the same counter."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from stats_continual import P_THRESHOLD, variance_z_pvalue

from streamdp.continual.counter import ContinualCounter
from streamdp.continual.gaussian_budgets import GaussianBudget, gaussian_node_sigmas
from streamdp.continual.strategy import build_strategy
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler
from streamdp.noise.gaussian import discrete_gaussian_variance

BUDGET = GaussianBudget(Fraction(3, 10), 5)  # rho 0.3, a census record's L2^2 = k + 2 = 5


@pytest.mark.parametrize("mechanism", ["binary", "fda", "naive"])
@pytest.mark.parametrize("horizon", [1, 7, 64, 100])
def test_every_period_spends_at_most_rho_exactly(mechanism: str, horizon: int) -> None:
    strategy = build_strategy(mechanism, "total", horizon)
    sigmas = gaussian_node_sigmas(strategy, BUDGET)
    worst = Fraction(0)
    for period in range(1, horizon + 1):
        spent = sum(
            (
                Fraction(BUDGET.l2_squared) / (2 * Fraction(float(sigmas[node - 1])) ** 2)
                for node in strategy.covering_nodes(period)
            ),
            Fraction(0),
        )
        assert spent <= BUDGET.rho
        worst = max(worst, spent)
    if mechanism == "binary" and horizon == 64:  # 7 levels, equal shares: tight to a few ulps
        assert float(worst) == pytest.approx(0.3, rel=1e-12)


def _counter(seed: int, width: int = 4, horizon: int = 8) -> ContinualCounter:
    return ContinualCounter(
        build_strategy("binary", "total", horizon),
        1.0,
        5.0,
        width,
        InsecureSeededSampler(seed),
        gaussian=BUDGET,
    )


def test_declared_variances_match_a_simulation() -> None:
    trials, width, horizon = 4000, 4, 8
    noise = np.empty((horizon, trials * width))
    for trial in range(trials):
        counter = _counter(trial, width, horizon)
        for t in range(horizon):
            release = counter.close_period(np.zeros(width, dtype=np.int64))
            noise[t, trial * width : (trial + 1) * width] = release.noisy_total
    probe = _counter(0, width, horizon)
    for t in (1, 4, 7, 8):
        declared = probe.total_variance(t)
        assert variance_z_pvalue(noise[t - 1], declared) > P_THRESHOLD
        assert variance_z_pvalue(noise[t - 1], 1.3 * declared) < P_THRESHOLD  # power
    # the declared variance is the discrete Gaussian's, not sigma^2 alone
    sigmas = gaussian_node_sigmas(probe.strategy, BUDGET)
    node_1 = discrete_gaussian_variance(float(sigmas[0]))
    assert probe.total_variance(1) == node_1


class _CoupledGaussian(InsecureSeededSampler):
    """Seeded labelled discrete Gaussian draws, minus ``record`` on the nodes in ``covering``
    (the noise D + record needs to give D's noisy nodes)."""

    def __init__(self, seed: int, record: np.ndarray, covering: set[int]) -> None:
        super().__init__(seed)
        self.record, self.covering = record, covering

    def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> np.ndarray:
        noise = super().discrete_gaussian(sigma, size, label=label)
        node = int(label.rsplit("|n", 1)[1])
        return noise - self.record if node in self.covering else noise


@pytest.mark.parametrize("period", [1, 3, 8])
def test_neighbours_give_identical_releases_under_the_coupled_noise(period: int) -> None:
    """D and D + one census-like record (L2^2 = 5, the bound) in ``period``: with node noise
    z and z minus the record on the nodes covering that period, every release is identical
    (releases are integer sums of the noisy nodes alone)."""
    horizon, width = 8, 6
    record = np.array([1, 1, 0, 1, 1, 1], dtype=np.int64)
    assert int(record @ record) == BUDGET.l2_squared
    counts = np.random.default_rng(5).integers(0, 50, size=(horizon, width))
    strategy = build_strategy("binary", "total", horizon)
    covering = set(strategy.covering_nodes(period))
    runs = []
    for sampler, extra in (
        (InsecureSeededSampler(9), 0),
        (_CoupledGaussian(9, record, covering), 1),
    ):
        counter = ContinualCounter(
            strategy, 1.0, 5.0, width, sampler, noise_label="s", gaussian=BUDGET
        )
        releases = []
        for t in range(1, horizon + 1):
            step = counts[t - 1] + (extra * record if t == period else 0)
            release = counter.close_period(step.astype(np.int64))
            releases.append((release.noisy_count.tolist(), release.noisy_total.tolist()))
        runs.append(releases)
    assert runs[0] == runs[1]
    # and the coupling is not vacuous: without the shifted noise the releases differ
    plain = ContinualCounter(
        strategy, 1.0, 5.0, width, InsecureSeededSampler(9), noise_label="s", gaussian=BUDGET
    )
    moved = [
        plain.close_period(
            (counts[t - 1] + (record if t == period else 0)).astype(np.int64)
        ).noisy_total.tolist()
        for t in range(1, horizon + 1)
    ]
    assert moved != [total for _, total in runs[0]]


def test_state_restores_the_gaussian_counter_and_its_next_epoch() -> None:
    counter = _counter(3)
    for _ in range(5):
        counter.close_period(np.arange(4, dtype=np.int64))
    state = counter.state()
    assert state["gaussian"] == {"definition": "zcdp", "rho": "3/10", "l2_squared": 5}
    restored = ContinualCounter.from_state(state, InsecureSeededSampler(3))
    assert restored.gaussian == BUDGET
    assert restored.total_variance(5) == counter.total_variance(5)
    assert counter.next_epoch().gaussian == BUDGET


def test_a_sampler_without_the_discrete_gaussian_is_refused() -> None:
    class LaplaceOnly:
        name = "laplace-only"
        secure = False

        def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
            return np.zeros(size, dtype=np.int64)

    counter = ContinualCounter(
        build_strategy("binary", "total", 4), 1.0, 5.0, 2, LaplaceOnly(), gaussian=BUDGET
    )
    with pytest.raises(ConfigError, match="cannot draw the discrete Gaussian"):
        counter.close_period(np.zeros(2, dtype=np.int64))


def test_kary_gls_levels_spend_at_most_rho_exactly_and_declare_the_simulated_variance() -> None:
    """The k-ary GLS tree under zCDP (budgets tuned for the Gaussian): one record touches one
    block per level, so the levels' l2^2 / (2 sigma_l^2) add up to at most rho exactly; the
    fixed-point GLS releases have the declared variance (simulation, power check)."""
    from streamdp.continual.factored_counter import FactoredCounter
    from streamdp.continual.factored_noise import level_sigmas
    from streamdp.continual.kary_gaussian import optimise_gaussian_gls

    horizon, width, trials = 9, 3, 3000
    strategy = optimise_gaussian_gls(horizon, "total")
    sigmas = level_sigmas(strategy, BUDGET)
    spent = sum((Fraction(BUDGET.l2_squared) / (2 * Fraction(s) ** 2) for s in sigmas), Fraction(0))
    assert spent <= BUDGET.rho
    assert float(spent) == pytest.approx(0.3, rel=1e-9)  # and the budget is used, not wasted
    noise = np.empty((horizon, trials * width))
    for trial in range(trials):
        counter = FactoredCounter(
            strategy, 1.0, 5.0, width, InsecureSeededSampler(trial), gaussian=BUDGET
        )
        for t in range(horizon):
            release = counter.close_period(np.zeros(width, dtype=np.int64))
            noise[t, trial * width : (trial + 1) * width] = release.noisy_total
    # what the counter draws, not what the budget functions say it should: one call per level
    drawn: list[float] = []

    class Recording(InsecureSeededSampler):
        def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> Any:
            drawn.append(sigma)
            return super().discrete_gaussian(sigma, size, label=label)

    recorded = FactoredCounter(strategy, 1.0, 5.0, width, Recording(0), gaussian=BUDGET)
    recorded.close_period(np.zeros(width, dtype=np.int64))
    assert len(drawn) == len(strategy.blocks)
    spent_drawn = sum(
        (Fraction(BUDGET.l2_squared) / (2 * Fraction(s) ** 2) for s in drawn), Fraction(0)
    )
    assert spent_drawn <= BUDGET.rho
    assert float(spent_drawn) == pytest.approx(0.3, rel=1e-9)
    probe = FactoredCounter(strategy, 1.0, 5.0, width, InsecureSeededSampler(0), gaussian=BUDGET)
    for t in (1, 5, 9):
        declared = probe.total_variance(t)
        assert variance_z_pvalue(noise[t - 1], declared) > P_THRESHOLD
        assert variance_z_pvalue(noise[t - 1], 1.3 * declared) < P_THRESHOLD
    state = probe.state()
    assert state["gaussian"] == BUDGET.to_dict()
    assert FactoredCounter.from_state(state, InsecureSeededSampler(0)).gaussian == BUDGET
