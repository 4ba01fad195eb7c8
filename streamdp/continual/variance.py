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

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.continual import fenwick
from streamdp.continual.strategy import Strategy
from streamdp.errors import ConfigError

Noise = Literal["laplace", "discrete-laplace"]
NOISES: tuple[Noise, ...] = ("laplace", "discrete-laplace")


def check_noise(noise: str) -> Noise:
    """Return ``noise`` typed as :data:`Noise`, or raise :class:`ConfigError`."""
    for known in NOISES:
        if noise == known:
            return known
    raise ConfigError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")


def check_privacy(epsilon: float, sensitivity: float) -> tuple[float, float]:
    """Validate ``epsilon > 0`` and ``sensitivity > 0`` (finite); return them as floats."""
    eps, delta = float(epsilon), float(sensitivity)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ConfigError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not math.isfinite(delta) or delta <= 0.0:
        raise ConfigError(
            f"sensitivity (Delta, the L1 contribution bound of one event) must be a finite "
            f"number > 0, got {sensitivity!r}"
        )
    return eps, delta


def node_scales(strategy: Strategy, epsilon: float, sensitivity: float) -> npt.NDArray[np.float64]:
    """Noise scale ``Delta / (epsilon * lambda_i)`` of every node; shape ``(N,)``, counts."""
    eps, delta = check_privacy(epsilon, sensitivity)
    scales: npt.NDArray[np.float64] = delta / (eps * strategy.weights)
    return scales


def scale_variances(scales: npt.NDArray[np.float64], noise: Noise) -> npt.NDArray[np.float64]:
    """Variance of Laplace (``2 b^2``) or exact discrete Laplace noise of each scale ``b``."""
    b = np.asarray(scales, dtype=np.float64)
    if check_noise(noise) == "laplace":
        return 2.0 * b * b
    q = np.exp(-1.0 / b)
    out: npt.NDArray[np.float64] = 2.0 * q / np.expm1(-1.0 / b) ** 2
    return out


def node_variances(
    strategy: Strategy, epsilon: float, sensitivity: float, noise: Noise = "discrete-laplace"
) -> npt.NDArray[np.float64]:
    """Noise variance ``v_i`` of every node; shape ``(N,)``, counts^2."""
    return scale_variances(node_scales(strategy, epsilon, sensitivity), noise)


def total_variances(
    strategy: Strategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t)`` for ``t = 1..N`` given node variances; shape ``(N,)``."""
    v = np.asarray(node_var, dtype=np.float64)
    if strategy.is_tree:
        return fenwick.prefix_path_sums(v)
    out: npt.NDArray[np.float64] = np.cumsum(v)
    return out


def count_variances(
    strategy: Strategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t - s~_{t-1})`` for ``t = 1..N`` given node variances; shape ``(N,)``."""
    v = np.asarray(node_var, dtype=np.float64)
    if not strategy.is_tree:
        return v.copy()
    T = np.concatenate([[0.0], total_variances(strategy, v)])  # T[t] = Var(s~_t), T[0] = 0
    t = np.arange(1, v.shape[0] + 1, dtype=np.int64)
    out: npt.NDArray[np.float64] = v + T[t - 1] - T[t & (t - 1)]
    return out


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
