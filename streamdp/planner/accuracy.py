"""The accuracy of one configuration: :func:`plan` and the :class:`Plan` it returns.

Pure maths on public parameters only (mechanism, objective, horizon N, epsilon, Delta, noise;
k for the k-ary mechanisms). A plan holds the variance of the noisy running total ``s~_t`` and
of the period count ``s~_t - s~_{t-1}``, averaged and maximised over ``t = 1..N``, the values a
counter stores per epoch, and the 95% error bound at chosen ``t``
(:func:`streamdp.planner.error_bound.error_bound`). :func:`compare` plans every mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtri

from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.factored_noise import level_scales
from streamdp.continual.fda import check_objective
from streamdp.continual.kary_config import KARY_MECHANISMS, check_kary_objective
from streamdp.continual.kary_optimise import optimise
from streamdp.continual.node_budgets import node_scales
from streamdp.continual.privacy import check_privacy
from streamdp.continual.strategy import (
    Strategy,
    build_strategy,
    check_mechanism,
    objectives_for,
)
from streamdp.continual.variance import (
    check_noise,
    scale_variances,
    variance_profile,
)
from streamdp.engine.stream_table import MAX_HORIZON as SPEC_MAX_HORIZON
from streamdp.error_band import half_width95
from streamdp.errors import ConfigError
from streamdp.planner.error_bound import EXACT_MAX_NODES, error_bound

#: The longest horizon a spec accepts (streamdp.engine.stream_table): no plan beyond it.
MAX_HORIZON = SPEC_MAX_HORIZON


@dataclass(frozen=True)
class ReleaseAccuracy:
    """Accuracy of the running total at one release ``t`` (units: counts): its standard
    deviation and its 95% error bound."""

    t: int
    total_std: float
    error95: float


@dataclass(frozen=True)
class Plan:
    """Expected accuracy of one configuration; variances in counts^2. Under zCDP
    (:mod:`streamdp.planner.zcdp`) ``epsilon`` is the (epsilon, delta) bound of ``privacy``."""

    mechanism: str
    objective: str
    horizon: int
    epsilon: float
    sensitivity: float
    noise: str  # a Noise of streamdp.continual.variance, or "discrete-gaussian" under zCDP
    mean_variance: float
    max_variance: float
    releases: list[ReleaseAccuracy] = field(default_factory=list)
    mean_count_variance: float = math.nan
    max_count_variance: float = math.nan
    #: noisy values a counter stores per epoch (one per tree node; the BLT: one per period)
    state_values_per_counter: int = 0
    #: numbers a counter works with besides them, where that is the point (the BLT's buffers
    #: and running total, 2d + 1); None otherwise
    working_state_per_counter: int | None = None
    branching: int | None = None
    level_budgets: tuple[float, ...] = ()
    # the privacy definition and its parameters (streamdp.continual.definitions): pure epsilon
    # unless planned under zCDP (then also rho and the delta ``epsilon`` is stated at)
    privacy: dict[str, object] = field(default_factory=dict)

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
            "working_state_per_counter": self.working_state_per_counter,
            "branching": self.branching,
            "level_budgets": list(self.level_budgets),
            "privacy": self.privacy or {"definition": "pure", "epsilon": self.epsilon},
            "releases": [
                {
                    "t": r.t,
                    "total_std": r.total_std,
                    "error95": r.error95,
                    # the 95% band readers draw (streamdp.error_band): every read path
                    "published_half_width95": half_width95(r.total_std),
                }
                for r in self.releases
            ],
        }


def report_points(horizon: int) -> list[int]:
    """A few releases to show: 1, quarter, half, three quarters, the last."""
    points = {1, max(1, horizon // 4), max(1, horizon // 2), max(1, 3 * horizon // 4), horizon}
    return sorted(points)


def check_plan_horizon(horizon: int) -> int:
    """``horizon`` as :func:`check_horizon` takes it, and at most what a stream spec accepts."""
    horizon = check_horizon(horizon)
    if horizon > MAX_HORIZON:
        raise ConfigError(
            f"horizon {horizon} exceeds {MAX_HORIZON:,}, the most a stream spec accepts; plan a "
            "shorter horizon: a stream rolls into a new epoch every N periods"
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
    check_plan_horizon(horizon)
    strategy: Strategy = build_strategy(mech, obj, horizon)
    profile = variance_profile(strategy, eps, delta, kind)
    scales = node_scales(strategy, eps, delta)
    releases = []
    for t in points if points is not None else report_points(horizon):
        if not 1 <= t <= horizon:
            raise ConfigError(f"release t must be in 1..{horizon}, got {t}")
        path = np.asarray(strategy.read_path(t), dtype=np.int64)
        releases.append(
            ReleaseAccuracy(
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
    check_plan_horizon(horizon)
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
        releases.append(ReleaseAccuracy(t=t, total_std=math.sqrt(variance), error95=bound))
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
