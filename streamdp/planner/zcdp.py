"""Planning a rho-zCDP stream (issue 27): the accuracy of each zCDP counter before spending any
budget, and the comparison with the pure-DP mechanisms at matched (epsilon, delta).

Counters (:data:`ZCDP_MECHANISMS`), each with discrete Gaussian noise calibrated on the L2
sensitivity ``Delta_2`` (the most one event moves the stream's counter vector in a period, in
L2 norm):

- ``binary``: the Fenwick tree with equal level shares (``rho / L`` per level);
- ``kary_gls``: the k-ary block tree with least-squares decoding, ``k`` and level budgets tuned
  for the Gaussian (:mod:`streamdp.continual.kary_gaussian`);
- ``sqrt_toeplitz``: the square-root factorization ``A = C C`` of the running-total matrix;
- ``blt``: a buffered-linear-Toeplitz factorization (``--buffers``, default 3), its parameters
  optimised for the objective at this horizon; O(buffers) noise state per counter;
- ``toeplitz``: the best lower-triangular Toeplitz factorization for the objective (O(N) state).

Variances are per release of the running total, in counts^2, with the continuous Gaussian's
``sigma^2 = Delta_2^2 / (2 rho)`` per unit of L2 sensitivity (the discrete Gaussian's exact
variance is below it, :func:`streamdp.noise.gaussian.discrete_gaussian_variance`, and equal in
float64 once ``sigma > 8``). The 95% bound is the normal quantile of that variance.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy.special import ndtri

from streamdp.continual.blt_factorization import optimise_blt
from streamdp.continual.definitions import DEFAULT_DELTA, PureLoss, ZcdpLoss, rho_for_epsilon
from streamdp.continual.kary_gaussian import optimise_gaussian_gls, unit_node_variances
from streamdp.continual.matrix_factorization import (
    ToeplitzFactorization,
    optimise_toeplitz,
    sqrt_toeplitz,
    variance_scale,
)
from streamdp.continual.strategy import build_strategy
from streamdp.errors import ConfigError
from streamdp.planner.accuracy import Plan, ReleaseAccuracy, _check_horizon, compare, report_points

ZCDP_MECHANISMS = ("binary", "kary_gls", "sqrt_toeplitz", "blt", "toeplitz")
ZCDP_OBJECTIVES = ("total", "minimax")
#: What :func:`compare_definitions` plans under zCDP, in order.
ZCDP_COMPARED: tuple[tuple[str, str], ...] = (
    ("binary", "total"),
    ("kary_gls", "total"),
    ("sqrt_toeplitz", "total"),
    ("blt", "total"),
    ("blt", "minimax"),
    ("toeplitz", "total"),
    ("toeplitz", "minimax"),
)
_MF_OBJECTIVE = {"total": "mean", "minimax": "max"}


def zcdp_objectives_for(mechanism: str) -> tuple[str, ...]:
    """The objectives ``mechanism`` takes under zCDP (:class:`ConfigError` if it has none)."""
    if mechanism not in ZCDP_MECHANISMS:
        raise ConfigError(
            f"under zCDP the mechanism must be one of {', '.join(ZCDP_MECHANISMS)}, got "
            f"{mechanism!r}"
        )
    return ("total",) if mechanism in ("binary", "sqrt_toeplitz") else ZCDP_OBJECTIVES


def _unit_variances(
    mechanism: str, objective: str, horizon: int, branching: int | None, buffers: int
) -> tuple[np.ndarray, np.ndarray, int, int | None, tuple[float, ...]]:
    """Running-total and period-count variances per unit ``sigma^2`` (``Delta_2 = 1``,
    ``rho = 1/2``), the noisy values a counter holds, ``k`` and the level budgets."""
    if mechanism == "binary":
        tree = build_strategy("binary", "total", horizon)
        node_var = 1.0 / np.asarray(tree.weights, dtype=np.float64)
        return (
            tree.total_variances(node_var),
            tree.count_variances(node_var),
            tree.state_values_per_counter,
            None,
            (),
        )
    if mechanism == "kary_gls":
        gls = optimise_gaussian_gls(horizon, objective, branching)
        node_var = unit_node_variances(gls)
        return (
            gls.total_variances(node_var),
            gls.count_variances(node_var),
            gls.state_values_per_counter,
            gls.branching,
            gls.budgets,
        )
    factorization: ToeplitzFactorization
    state = horizon  # the worker stores one noisy value per period (the BLT too)
    if mechanism == "sqrt_toeplitz":
        factorization = sqrt_toeplitz(horizon)
    elif mechanism == "blt":
        factorization = optimise_blt(horizon, buffers, _MF_OBJECTIVE[objective]).factorization(
            horizon
        )
    else:
        factorization = optimise_toeplitz(horizon, _MF_OBJECTIVE[objective])
    b = np.asarray(factorization.b_coefficients, dtype=np.float64)
    d = np.diff(b, prepend=0.0)  # the count's noise weights: row t of B minus row t - 1
    sens2 = factorization.sensitivity_squared
    return (
        np.asarray(factorization.release_variances(), dtype=np.float64),
        sens2 * np.cumsum(d * d),
        state,
        None,
        (),
    )


def plan_zcdp(
    mechanism: str,
    objective: str,
    horizon: int,
    rho: float | Fraction,
    sensitivity: float,
    *,
    delta: Fraction | float = DEFAULT_DELTA,
    branching: int | None = None,
    buffers: int = 3,
    points: list[int] | None = None,
) -> Plan:
    """Expected accuracy of a zCDP counter; ``sensitivity`` is the L2 bound ``Delta_2``; the
    plan's ``epsilon`` is the (epsilon, ``delta``)-DP the loss implies (rounded up)."""
    if objective not in zcdp_objectives_for(mechanism):
        raise ConfigError(
            f"objective {objective!r} does not apply to {mechanism!r} under zCDP; it takes "
            f"{' or '.join(zcdp_objectives_for(mechanism))}"
        )
    if branching is not None and mechanism != "kary_gls":
        raise ConfigError(f"branching (k) applies to kary_gls only, not {mechanism!r}")
    if isinstance(buffers, bool) or not isinstance(buffers, int) or not 1 <= buffers <= 8:
        raise ConfigError(f"buffers must be an integer between 1 and 8, got {buffers!r}")
    _check_horizon(horizon)
    loss = ZcdpLoss.of(rho)
    scale = variance_scale(float(loss.rho), float(sensitivity))
    total, count, state, k, budgets = _unit_variances(
        mechanism, objective, horizon, branching, buffers
    )
    total = total * scale
    count = count * scale
    releases = []
    for t in points if points is not None else report_points(horizon):
        if not 1 <= t <= horizon:
            raise ConfigError(f"release t must be in 1..{horizon}, got {t}")
        std = math.sqrt(float(total[t - 1]))
        releases.append(ReleaseAccuracy(t=t, total_std=std, error95=float(ndtri(0.975)) * std))
    return Plan(
        mechanism=mechanism,
        objective=objective,
        horizon=horizon,
        epsilon=loss.epsilon_at(delta),
        sensitivity=float(sensitivity),
        noise="discrete-gaussian",
        mean_variance=float(total.mean()),
        max_variance=float(total.max()),
        releases=releases,
        mean_count_variance=float(count.mean()),
        max_count_variance=float(count.max()),
        state_values_per_counter=state,
        # the BLT works with d encoding and d decoding buffers and its running total
        working_state_per_counter=2 * buffers + 1 if mechanism == "blt" else None,
        branching=k,
        level_budgets=budgets,
        privacy=loss.as_dict(delta),
    )


def compare_definitions(
    horizon: int,
    epsilon: float,
    sensitivity: float,
    l2_sensitivity: float,
    delta: Fraction | float = DEFAULT_DELTA,
) -> list[Plan]:
    """Every pure-DP mechanism at ``epsilon`` (L1 bound ``sensitivity``, discrete Laplace) and
    every zCDP mechanism at the largest rho that is (``epsilon``, ``delta``)-DP (L2 bound
    ``l2_sensitivity``): the two definitions at matched (epsilon, delta)."""
    rho = rho_for_epsilon(epsilon, delta)
    pure = compare(horizon, epsilon, sensitivity)
    for result in pure:
        object.__setattr__(result, "privacy", PureLoss.of(epsilon).as_dict(delta))
    return pure + [
        plan_zcdp(m, o, horizon, rho, l2_sensitivity, delta=delta, points=[horizon])
        for m, o in ZCDP_COMPARED
    ]
