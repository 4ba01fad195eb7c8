"""Analytic variance of every release of a continual counter (DESIGN §3).

Node ``i`` gets noise of scale ``b_i = Delta / (epsilon * lambda_i)``; its variance is
``2 b_i^2`` (continuous Laplace) or ``2 q_i / (1 - q_i)^2`` with ``q_i = exp(-1/b_i)`` (exact
discrete Laplace, what the counter draws). Node noises are independent, so

- running total ``s~_t``:  ``Var = sum_{i in path(t)} v_i``;
- period count ``s~_t - s~_{t-1}``: the nodes of the two read paths that differ,
  ``Var = v_t + Var(s~_{t-1}) - Var(s~_{t - lowbit(t)})`` for the tree (the shared tail of both
  paths is the read path of ``t - lowbit(t)``), and ``v_t`` for naive.

Units: counts^2 (the unit of the counted quantity, squared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.continual.node_budgets import node_scales
from streamdp.continual.strategy import CountingStrategy, Strategy
from streamdp.errors import ConfigError
from streamdp.noise.sampler import discrete_laplace_variances

Noise = Literal["laplace", "discrete-laplace"]
NOISES: tuple[Noise, ...] = ("laplace", "discrete-laplace")


def check_noise(noise: str) -> Noise:
    """Return ``noise`` typed as :data:`Noise`, or raise :class:`ConfigError`."""
    for known in NOISES:
        if noise == known:
            return known
    raise ConfigError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")


def scale_variances(scales: npt.NDArray[np.float64], noise: Noise) -> npt.NDArray[np.float64]:
    """Variance of Laplace (``2 b^2``) or exact discrete Laplace noise of each scale ``b``."""
    b = np.asarray(scales, dtype=np.float64)
    if check_noise(noise) == "laplace":
        return 2.0 * b * b
    return discrete_laplace_variances(b)


def node_variances(
    strategy: Strategy, epsilon: float, sensitivity: float, noise: Noise = "discrete-laplace"
) -> npt.NDArray[np.float64]:
    """Noise variance ``v_i`` of every node; shape ``(N,)``, counts^2."""
    return scale_variances(node_scales(strategy, epsilon, sensitivity), noise)


def total_variances(
    strategy: CountingStrategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t)`` for ``t = 1..N`` given node variances; shape ``(N,)`` (any strategy)."""
    return strategy.total_variances(np.asarray(node_var, dtype=np.float64))


def count_variances(
    strategy: CountingStrategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t - s~_{t-1})`` for ``t = 1..N`` given node variances; shape ``(N,)``."""
    return strategy.count_variances(np.asarray(node_var, dtype=np.float64))


@dataclass(frozen=True)
class VarianceProfile:
    """Release variances of one configuration (counts^2); arrays shape ``(N,)``."""

    node: npt.NDArray[np.float64]
    total: npt.NDArray[np.float64]
    count: npt.NDArray[np.float64]

    @property
    def mean_variance(self) -> float:
        """Mean over ``t = 1..N`` of ``Var(s~_t)`` (the paper's per-release MSE)."""
        return float(self.total.mean())

    @property
    def max_variance(self) -> float:
        """Max over ``t = 1..N`` of ``Var(s~_t)``."""
        return float(self.total.max())


def variance_profile(
    strategy: Strategy, epsilon: float, sensitivity: float, noise: Noise = "discrete-laplace"
) -> VarianceProfile:
    """Node, running-total and period-count variances for every release of ``strategy``."""
    v = node_variances(strategy, epsilon, sensitivity, noise)
    return VarianceProfile(
        node=v, total=total_variances(strategy, v), count=count_variances(strategy, v)
    )
