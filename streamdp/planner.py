"""Accuracy planner: the error a continual counter will have, before any budget is spent.

Pure maths on public parameters only (mechanism, objective, horizon N, epsilon, Delta, noise;
k for the k-ary mechanisms). Reports the variance of the noisy running total ``s~_t`` and of
the period count ``s~_t - s~_{t-1}``, averaged and maximised over ``t = 1..N``, the values a
counter stores per epoch, and the 95% error bound at chosen ``t``:
the ``q`` with ``P(|s~_t - s_t| <= q) >= 0.95``, computed from the exact distribution of the sum
of the independent node noises on the read path (numerical convolution on a lattice), not from a
normal approximation (a single Laplace node has a 95% bound of ``b ln 20 = 2.12 sigma``).
When more than ``EXACT_MAX_NODES`` nodes are summed (naive mechanism, large t) the sum is normal
to within plotting accuracy (excess kurtosis at most ``3/n``) and the normal quantile is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.signal import fftconvolve
from scipy.special import ndtri

from streamdp.continual.factored_counter import level_scales
from streamdp.continual.fda import check_objective
from streamdp.continual.kary_config import KARY_MECHANISMS, check_kary_objective
from streamdp.continual.kary_optimise import optimise
from streamdp.continual.strategy import (
    Strategy,
    build_strategy,
    check_mechanism,
    objectives_for,
)
from streamdp.continual.variance import (
    Noise,
    check_noise,
    check_privacy,
    node_scales,
    scale_variances,
    variance_profile,
)
from streamdp.errors import ConfigError

MAX_HORIZON = 100_000_000
EXACT_MAX_NODES = 64
_GRID_POINTS_PER_STD = 400  # lattice resolution of the convolution
_TAIL = 40.0  # each node's distribution is kept to +-40 scales (mass beyond: e^-40)


@dataclass(frozen=True)
class ReleaseError:
    """Error of the running total at one release ``t`` (units: counts)."""

    t: int
    total_std: float
    error95: float


@dataclass(frozen=True)
class Plan:
    """Expected accuracy of one configuration; variances in counts^2."""

    mechanism: str
    objective: str
    horizon: int
    epsilon: float
    sensitivity: float
    noise: Noise
    mean_variance: float
    max_variance: float
    releases: list[ReleaseError] = field(default_factory=list)
    mean_count_variance: float = math.nan
    max_count_variance: float = math.nan
    state_values_per_counter: int = 0
    branching: int | None = None
    level_budgets: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "mechanism": self.mechanism,
            "objective": self.objective,
            "horizon": self.horizon,
            "epsilon": self.epsilon,
            "sensitivity": self.sensitivity,
            "noise": self.noise,
            "mean_variance": self.mean_variance,
            "max_variance": self.max_variance,
            "mean_std": math.sqrt(self.mean_variance),
            "max_std": math.sqrt(self.max_variance),
            "mean_count_variance": self.mean_count_variance,
            "max_count_variance": self.max_count_variance,
            "state_values_per_counter": self.state_values_per_counter,
            "branching": self.branching,
            "level_budgets": list(self.level_budgets),
            "releases": [
                {"t": r.t, "total_std": r.total_std, "error95": r.error95} for r in self.releases
            ],
        }


def _node_pmf(scale: float, h: float, noise: Noise) -> npt.NDArray[np.float64]:
    """Distribution of one node's noise on the lattice ``h * k``; symmetric, sums to 1."""
    K = max(1, math.ceil(_TAIL * scale / h))
    k = np.arange(-K, K + 1, dtype=np.float64)
    if noise == "discrete-laplace" and h == 1.0:
        q = math.exp(-1.0 / scale)
        pmf = (1.0 - q) / (1.0 + q) * q ** np.abs(k)
    else:  # continuous Laplace (or a discrete one far coarser than its lattice) binned to h
        upper = np.abs(k) * h + 0.5 * h
        lower = np.maximum(np.abs(k) * h - 0.5 * h, 0.0)
        pmf = 0.5 * (np.exp(-lower / scale) - np.exp(-upper / scale))
        pmf[K] = 1.0 - math.exp(-0.5 * h / scale)
    out: npt.NDArray[np.float64] = pmf / pmf.sum()
    return out


def error_bound(scales: npt.NDArray[np.float64], noise: Noise, level: float = 0.95) -> float:
    """Smallest ``q`` with ``P(|sum of independent noises| <= q) >= level``; units of the scales.

    ``scales`` shape ``(n,)``: the Laplace scale of each summed node.
    """
    b = np.asarray(scales, dtype=np.float64)
    std = math.sqrt(float(np.sum(2.0 * b * b)))
    if b.shape[0] > EXACT_MAX_NODES:
        variance = float(np.sum(scale_variances(b, noise)))
        return float(ndtri(0.5 + 0.5 * level)) * math.sqrt(variance)
    h = std / _GRID_POINTS_PER_STD
    if noise == "discrete-laplace":
        h = max(1.0, float(round(h))) if h > 1.0 else 1.0
    dist = np.ones(1)
    for scale in b:
        dist = np.clip(fftconvolve(dist, _node_pmf(float(scale), h, noise)), 0.0, None)
    dist /= dist.sum()
    centre = dist.shape[0] // 2
    # mass of |X| <= k h for k = 0, 1, ...
    cum = np.cumsum(dist[centre:] + dist[centre::-1]) - dist[centre]
    k = int(np.searchsorted(cum, level))
    return k * h


def planned_std(result: Plan) -> float:
    """The standard deviation ``result``'s objective minimises (counts): the mean running-total
    variance's root for ``total``, the largest running total's for ``minimax``, the mean
    period count's for ``count``."""
    if result.objective == "minimax":
        return math.sqrt(result.max_variance)
    if result.objective == "count":
        return math.sqrt(result.mean_count_variance)
    return math.sqrt(result.mean_variance)


def epsilon_for_std(  # noqa: PLR0917 - plan()'s parameters, target first
    target_std: float,
    mechanism: str,
    objective: str,
    horizon: int,
    sensitivity: float,
    noise: str = "discrete-laplace",
    *,
    branching: int | None = None,
    digits: int = 3,
) -> tuple[Decimal, Plan]:
    """The smallest epsilon per epoch with ``digits`` significant digits (a value a spec holds
    exactly) at which :func:`planned_std` is at most ``target_std``, and the plan at it.

    Every node's Laplace scale is ``Delta / (epsilon lambda_i)`` with weights ``lambda_i`` that
    do not depend on epsilon, so for continuous Laplace noise every variance is exactly
    ``V(1) / epsilon^2`` and ``epsilon = std(1) / target`` solves it. The discrete noise's
    variance is at most the continuous one of the same scale (much less once scales fall below
    one count), and scales are rounded up for exact budgets; the variance still falls as
    epsilon grows, so the answer is found by bisection on the planner's own variance for
    ``noise`` below that solution, then rounded up and checked.
    """
    if not (math.isfinite(target_std) and target_std > 0):
        raise ConfigError(
            f"the target standard deviation must be a number > 0, got {target_std!r}"
        )
    if not 1 <= digits <= 15:
        raise ConfigError(f"digits must be in 1..15, got {digits!r}")

    def std_at(epsilon: float) -> float:
        return planned_std(
            plan(
                mechanism,
                objective,
                horizon,
                epsilon,
                sensitivity,
                noise,
                points=[1],
                branching=branching,
            )
        )

    continuous = plan(
        mechanism, objective, horizon, 1.0, sensitivity, "laplace", points=[1], branching=branching
    )
    high = planned_std(continuous) / target_std
    while std_at(high) > target_std:  # only by the rounding of scales: a step or two
        high *= 1.0 + 1e-6
    low = high / 2.0
    for _ in range(200):
        if std_at(low) > target_std:
            break
        high, low = low, low / 2.0
    for _ in range(60):  # std_at(low) > target >= std_at(high)
        middle = 0.5 * (low + high)
        if std_at(middle) > target_std:
            low = middle
        else:
            high = middle
        if high - low <= high * 1e-9:
            break
    exact = Decimal(repr(high))
    step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    epsilon = (exact / step).to_integral_value(rounding=ROUND_CEILING) * step
    while std_at(float(epsilon)) > target_std:  # rounding up keeps it met; checked anyway
        epsilon += step
    result = plan(
        mechanism, objective, horizon, float(epsilon), sensitivity, noise, branching=branching
    )
    return epsilon, result


def report_points(horizon: int) -> list[int]:
    """A few releases to show: 1, quarter, half, three quarters, the last."""
    points = {1, max(1, horizon // 4), max(1, horizon // 2), max(1, 3 * horizon // 4), horizon}
    return sorted(points)


def _check_horizon(horizon: int) -> int:
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ConfigError(f"horizon must be an integer >= 1, got {horizon!r}")
    if horizon > MAX_HORIZON:
        raise ConfigError(
            f"horizon {horizon} exceeds {MAX_HORIZON}; use epochs (a new tree every N periods)"
        )
    return horizon


def plan(  # noqa: PLR0917 - the planner's six public parameters, in CLI order
    mechanism: str,
    objective: str,
    horizon: int,
    epsilon: float,
    sensitivity: float,
    noise: str = "discrete-laplace",
    *,
    points: list[int] | None = None,
    branching: int | None = None,
) -> Plan:
    """Expected accuracy of a configuration (validates every argument, :class:`ConfigError`).

    ``mechanism``: any of :data:`streamdp.continual.strategy.ALL_MECHANISMS`; the k-ary ones
    take ``objective`` ``total``, ``minimax`` or ``count`` and optionally ``branching`` (k).
    """
    if objective not in objectives_for(mechanism):
        raise ConfigError(
            f"objective {objective!r} does not apply to mechanism {mechanism!r}; it takes "
            f"{' or '.join(objectives_for(mechanism))}"
        )
    if mechanism in KARY_MECHANISMS:
        return _plan_kary(
            mechanism, objective, horizon, epsilon, sensitivity, noise, points, branching
        )
    if branching is not None:
        raise ConfigError(
            f"branching (k) applies to {', '.join(KARY_MECHANISMS)} only, not {mechanism!r}"
        )
    mech = check_mechanism(mechanism)
    obj = check_objective(objective)
    kind = check_noise(noise)
    eps, delta = check_privacy(epsilon, sensitivity)
    _check_horizon(horizon)
    strategy: Strategy = build_strategy(mech, obj, horizon)
    profile = variance_profile(strategy, eps, delta, kind)
    scales = node_scales(strategy, eps, delta)
    releases = []
    for t in points if points is not None else report_points(horizon):
        if not 1 <= t <= horizon:
            raise ConfigError(f"release t must be in 1..{horizon}, got {t}")
        path = np.asarray(strategy.read_path(t), dtype=np.int64)
        releases.append(
            ReleaseError(
                t=t,
                total_std=math.sqrt(float(profile.total[t - 1])),
                error95=error_bound(scales[path - 1], kind),
            )
        )
    return Plan(
        mechanism=mech,
        objective=obj,
        horizon=horizon,
        epsilon=eps,
        sensitivity=delta,
        noise=kind,
        mean_variance=profile.mean_variance,
        max_variance=profile.max_variance,
        releases=releases,
        mean_count_variance=float(profile.count.mean()),
        max_count_variance=float(profile.count.max()),
        state_values_per_counter=strategy.state_values_per_counter,
    )


def _plan_kary(  # noqa: PLR0917 - plan()'s parameters
    mechanism: str,
    objective: str,
    horizon: int,
    epsilon: float,
    sensitivity: float,
    noise: str,
    points: list[int] | None,
    branching: int | None,
) -> Plan:
    """:func:`plan` for the k-ary strategies (negative digits, GLS).

    The 95% bound: a release's noise is ``sum_i m_i z_i``; with at most ``EXACT_MAX_NODES``
    nonzero ``m_i`` it is computed by convolution (exact for digits, whose ``m_i`` are +-1;
    for GLS's fractional ``m_i`` the discrete noise is treated as continuous Laplace of scale
    ``|m_i| b_i``), otherwise from the normal quantile of the exact variance.
    """
    kind = check_noise(noise)
    eps, delta = check_privacy(epsilon, sensitivity)
    _check_horizon(horizon)
    strategy = optimise(mechanism, check_kary_objective(objective), horizon, branching)
    scales = np.asarray(level_scales(strategy, epsilon, delta))[strategy.node_levels]
    node_var = scale_variances(scales, kind)
    total = strategy.total_variances(node_var)
    count = strategy.count_variances(node_var)
    releases = []
    for t in points if points is not None else report_points(horizon):
        if not 1 <= t <= horizon:
            raise ConfigError(f"release t must be in 1..{horizon}, got {t}")
        m = strategy.range_coefficients(1, t, node_var)
        used = np.flatnonzero(np.abs(m) > 1e-12)
        variance = float(total[t - 1])
        if used.shape[0] > EXACT_MAX_NODES:
            bound = float(ndtri(0.975)) * math.sqrt(variance)
        elif np.allclose(np.abs(m[used]), 1.0):
            bound = error_bound(scales[used], kind)
        else:
            bound = error_bound(np.abs(m[used]) * scales[used], "laplace")
        releases.append(ReleaseError(t=t, total_std=math.sqrt(variance), error95=bound))
    return Plan(
        mechanism=strategy.mechanism,
        objective=strategy.objective,
        horizon=horizon,
        epsilon=eps,
        sensitivity=delta,
        noise=kind,
        mean_variance=float(total.mean()),
        max_variance=float(total.max()),
        releases=releases,
        mean_count_variance=float(count.mean()),
        max_count_variance=float(count.max()),
        state_values_per_counter=strategy.state_values_per_counter,
        branching=strategy.branching,
        level_budgets=strategy.budgets,
    )


COMPARED: tuple[tuple[str, str], ...] = (
    ("naive", "total"),
    ("binary", "total"),
    ("fda", "total"),
    ("fda", "minimax"),
    ("kary_digits", "total"),
    ("kary_gls", "total"),
    ("kary_gls", "minimax"),
    ("kary_gls", "count"),
)


def compare(
    horizon: int, epsilon: float, sensitivity: float, noise: str = "discrete-laplace"
) -> list[Plan]:
    """:func:`plan` of every mechanism (and objective) of :data:`COMPARED`, in that order."""
    return [
        plan(mechanism, objective, horizon, epsilon, sensitivity, noise, points=[horizon])
        for mechanism, objective in COMPARED
    ]
