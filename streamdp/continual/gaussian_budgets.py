"""Exact per-node discrete Gaussian parameters of a one-node-per-period strategy under rho-zCDP
(issue 27; the zCDP counterpart of :mod:`streamdp.continual.node_budgets`).

One event moves the stream's counter vector by at most ``Delta_2`` in L2 norm in its period, and
that period is covered by the nodes of one Fenwick column. Node ``i`` gets the discrete Gaussian
with ``sigma_i^2 >= Delta_2^2 / (2 rho_i)``, ``rho_i = rho * lambda_i / B`` with ``B`` at least
every column sum of the weights: a record's loss is ``sum over its column of
Delta_2^2 / (2 sigma_i^2) <= rho`` (Canonne, Kamath and Steinke 2020, Theorem 4, and zCDP's
additive composition, Bun and Steinke 2016, Lemma 2.3). ``Delta_2^2`` is an integer (the
kinds' L2 bounds are sums of squared integer contributions), ``rho`` an exact rational, and
each ``sigma_i`` a float rounded UP until the inequality holds in rational arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from streamdp.continual.column_sums import weight_column_bound
from streamdp.continual.exact_float import float_sqrt_at_least
from streamdp.continual.strategy import Strategy
from streamdp.errors import BudgetError, ConfigError
from streamdp.noise.gaussian import (
    MAX_GAUSSIAN_SIGMA,
    MIN_GAUSSIAN_SIGMA,
    discrete_gaussian_variance,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GaussianBudget:
    """A zCDP stream's noise budget: ``rho`` per epoch (exact) and the squared L2 bound of one
    event's contribution, ``l2_squared`` (an integer >= 1)."""

    rho: Fraction
    l2_squared: int

    def __post_init__(self) -> None:
        if not isinstance(self.rho, Fraction) or self.rho <= 0:
            raise ConfigError(f"rho must be an exact number > 0, got {self.rho!r}")
        if isinstance(self.l2_squared, bool) or not isinstance(self.l2_squared, int):
            raise ConfigError(f"the squared L2 bound must be an integer, got {self.l2_squared!r}")
        if self.l2_squared < 1:
            raise ConfigError(f"the squared L2 bound must be >= 1, got {self.l2_squared}")

    def to_dict(self) -> dict[str, object]:
        """Plain state: rho as exact fraction text, so a restore rebuilds the same sigmas."""
        return {"definition": "zcdp", "rho": str(self.rho), "l2_squared": self.l2_squared}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> GaussianBudget:
        if data.get("definition") != "zcdp":
            raise ConfigError(f"not a zCDP budget: {data!r}")
        l2 = data.get("l2_squared")
        if not isinstance(l2, int):
            raise ConfigError(f"a zCDP budget's l2_squared must be an integer, got {l2!r}")
        return cls(Fraction(str(data["rho"])), l2)


def exact_sigma(l2_squared: int, rho_share: Fraction) -> float:
    """The smallest float ``sigma`` with ``l2^2 / (2 sigma^2) <= rho_share`` exactly:
    ``sqrt(l2^2 / (2 rho_share))`` rounded up (``inf`` or a subnormal far outside the sampler's
    safe range for an extreme rho, which the callers refuse)."""
    return float_sqrt_at_least(Fraction(l2_squared) / (2 * rho_share))


@lru_cache(maxsize=64)
def gaussian_node_sigmas(strategy: Strategy, budget: GaussianBudget) -> FloatArray:
    """``sigma_i`` of every node (shape ``(N,)``, read-only): node ``i`` spends at most
    ``rho * lambda_i / B`` exactly (see the module). :class:`ConfigError` when a sigma leaves
    the sampler's safe range."""
    bound = weight_column_bound(strategy)
    weights = np.asarray(strategy.weights, dtype=np.float64)
    sigmas = np.array(
        [exact_sigma(budget.l2_squared, budget.rho * Fraction(float(w)) / bound) for w in weights]
    )
    for node, sigma in (
        (int(np.argmax(sigmas)), sigmas.max()),
        (int(np.argmin(sigmas)), sigmas.min()),
    ):
        if not MIN_GAUSSIAN_SIGMA <= sigma <= MAX_GAUSSIAN_SIGMA:
            raise ConfigError(
                f"rho {float(budget.rho):.6g} with squared L2 bound {budget.l2_squared} gives "
                f"node {node + 1} of {strategy.mechanism} the discrete Gaussian sigma "
                f"{sigma:.6g}, outside the sampler's safe range [2^-40, 2^40]; choose rho and "
                "the sensitivity so that every sigma lies inside it"
            )
    column_loss = _worst_column_loss(strategy, sigmas, budget.l2_squared)
    if column_loss > budget.rho:
        raise BudgetError(
            f"the nodes covering one period spend rho {float(column_loss)!r}, above "
            f"{float(budget.rho)!r}; this is a bug, please report it"
        )
    sigmas.flags.writeable = False
    return sigmas


def _worst_column_loss(strategy: Strategy, sigmas: FloatArray, l2_squared: int) -> Fraction:
    """The largest exact ``sum over a period's nodes of l2^2 / (2 sigma_i^2)`` (checked on the
    period whose float sum is largest and on period 1, exactly in rationals)."""
    losses = l2_squared / (2.0 * sigmas * sigmas)
    periods = {1}
    if strategy.is_tree:
        from streamdp.continual.column_sums import fenwick_column_sums

        periods.add(int(np.argmax(fenwick_column_sums(losses))) + 1)
    worst = Fraction(0)
    for period in periods:
        exact = sum(
            (
                Fraction(l2_squared) / (2 * Fraction(float(sigmas[node - 1])) ** 2)
                for node in strategy.covering_nodes(period)
            ),
            Fraction(0),
        )
        worst = max(worst, exact)
    return worst


def node_variances(sigmas: FloatArray) -> FloatArray:
    """The exact discrete Gaussian variance of every node (shape of ``sigmas``)."""
    return np.array([discrete_gaussian_variance(float(s)) for s in sigmas], dtype=np.float64)
