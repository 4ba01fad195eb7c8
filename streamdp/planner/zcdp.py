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

Variances are per release of the running total, in counts^2, from the sigmas the worker draws
with: ``binary`` and ``kary_gls`` each node's (or level's) share of rho, ``blt`` the lattice
BLT's sigma (:func:`~streamdp.continual.lattice_blt.lattice_sigma`, which covers its rounding;
its standard deviations and bounds add the rounding-bias bound, as the worker declares them),
each from exact arithmetic rounded up, refused outside the sampler's safe range as the spec
refuses them. ``sqrt_toeplitz`` and ``toeplitz`` (planned for comparison, not run by the worker)
use the continuous Gaussian's ``sigma^2 = Delta_2^2 / (2 rho)`` per unit of L2 sensitivity. The
discrete Gaussian's exact variance is at most ``sigma^2`` and equal in float64 once
``sigma > 8`` (:func:`streamdp.noise.gaussian.discrete_gaussian_variance`). ``Delta_2^2`` is the
largest integer at most the square of the bound given (counts change by integers), as in
every spec. The 95% bound is computed from the discrete noise itself
(:func:`~streamdp.planner.error_bound.gaussian_error_bound`), not the normal quantile, which
covers too little of the integer releases of a binary tree at small sigmas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamdp.continual.blt_counter import blt_strategy
from streamdp.continual.definitions import DEFAULT_DELTA, PureLoss, ZcdpLoss, rho_for_epsilon
from streamdp.continual.factored_noise import level_sigmas
from streamdp.continual.gaussian_budgets import GaussianBudget, gaussian_node_sigmas
from streamdp.continual.kary_gaussian import optimise_gaussian_gls
from streamdp.continual.lattice_blt import GRID_BITS, lattice_sigma
from streamdp.continual.matrix_factorization import (
    optimise_toeplitz,
    sqrt_toeplitz,
    variance_scale,
)
from streamdp.continual.strategy import build_strategy
from streamdp.errors import ConfigError
from streamdp.noise.gaussian import MAX_GAUSSIAN_SIGMA, MIN_GAUSSIAN_SIGMA
from streamdp.planner.accuracy import (
    Plan,
    ReleaseAccuracy,
    check_plan_horizon,
    compare,
    report_points,
)
from streamdp.planner.error_bound import gaussian_error_bound

FloatArray = npt.NDArray[np.float64]

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


@dataclass(frozen=True)
class _GaussianNoise:
    """What a zCDP counter's noise does to its releases, at one rho and L2 bound: the
    variances of every running total and period count (counts^2, ``t = 1..N``), the noisy
    values it stores, ``k`` and level budgets (kary_gls), each release's noise as a weighted
    sum of discrete Gaussians (:meth:`terms`), and the lattice BLT's rounding-bias bound."""

    total: FloatArray
    count: FloatArray
    state: int
    terms: Callable[[int], tuple[FloatArray, FloatArray]]
    branching: int | None = None
    budgets: tuple[float, ...] = ()
    bias: FloatArray | None = None


def l2_squared_of(sensitivity: float) -> int:
    """The integer ``Delta_2^2`` the noise is calibrated on: one event changes counts by
    integers, so the square of its L2 norm is an integer at most ``sensitivity^2``, the largest
    such (2.24 plans as sqrt 5, 1.5 as sqrt 2; a float square root of an integer as itself).
    :class:`ConfigError` below 1 (an event that changes anything changes it by 1 or more)."""
    squared = float(sensitivity) ** 2
    largest = math.floor(squared * (1 + 1e-12))
    if largest < 1:
        raise ConfigError(
            f"under zCDP the sensitivity is the L2 bound of one event's integer changes, at "
            f"least 1; got {sensitivity!r}"
        )
    return largest


def _gaussian_noise(  # noqa: PLR0917 - the counter's public parameters
    mechanism: str,
    objective: str,
    horizon: int,
    budget: GaussianBudget,
    branching: int | None,
    buffers: int,
    touched: int,
) -> _GaussianNoise:
    """The noise of ``mechanism`` with the sigmas the worker draws (each from exact arithmetic,
    rounded up; :class:`ConfigError` outside the sampler's safe range, as the spec refuses).
    ``touched``: the most counters one event changes (the lattice BLT's rounding term)."""
    if mechanism == "binary":
        tree = build_strategy("binary", "total", horizon)
        sigmas = np.asarray(gaussian_node_sigmas(tree, budget), dtype=np.float64)
        node_var = sigmas * sigmas

        def tree_terms(t: int) -> tuple[FloatArray, FloatArray]:
            path = np.asarray(tree.read_path(t), dtype=np.int64) - 1
            return np.ones(path.shape[0]), sigmas[path]

        return _GaussianNoise(
            tree.total_variances(node_var),
            tree.count_variances(node_var),
            tree.state_values_per_counter,
            tree_terms,
        )
    if mechanism == "kary_gls":
        gls = optimise_gaussian_gls(horizon, objective, branching)
        node_sigmas = np.asarray(level_sigmas(gls, budget), dtype=np.float64)[gls.node_levels]
        gls_var = node_sigmas * node_sigmas

        def gls_terms(t: int) -> tuple[FloatArray, FloatArray]:
            m = gls.range_coefficients(1, t, gls_var)
            used = np.flatnonzero(np.abs(m) > 1e-12)
            return m[used], node_sigmas[used]

        return _GaussianNoise(
            gls.total_variances(gls_var),
            gls.count_variances(gls_var),
            gls.state_values_per_counter,
            gls_terms,
            gls.branching,
            gls.budgets,
        )
    if mechanism == "blt":
        # the lattice BLT the worker runs (its sigma covers the lattice's rounding too)
        lattice = blt_strategy(horizon, objective, buffers)
        sigma = lattice_sigma(lattice.lattice, horizon, budget.rho, budget.l2_squared, touched)
        unit = sigma * 2.0**-GRID_BITS
        b = lattice.b_coefficients
        d = lattice.count_weights
        return _GaussianNoise(
            lattice.lattice.release_variances(horizon, sigma),
            unit * unit * np.cumsum(d * d),
            horizon,  # one noisy value per period, like the others
            lambda t: (b[:t][::-1] * 2.0**-GRID_BITS, np.full(t, sigma)),
            bias=lattice.lattice.rounding_bounds(horizon),
        )
    factorization = (
        sqrt_toeplitz(horizon)
        if mechanism == "sqrt_toeplitz"
        else optimise_toeplitz(horizon, _MF_OBJECTIVE[objective])
    )
    scale = variance_scale(float(budget.rho), math.sqrt(budget.l2_squared))
    sigma = math.sqrt(factorization.sensitivity_squared * scale)
    if not MIN_GAUSSIAN_SIGMA <= sigma <= MAX_GAUSSIAN_SIGMA:
        raise ConfigError(
            f"rho {float(budget.rho):.6g} gives {mechanism} the discrete Gaussian sigma "
            f"{sigma:.6g}, outside the sampler's safe range [2^-40, 2^40]"
        )
    coefficients = np.asarray(factorization.b_coefficients, dtype=np.float64)
    steps = np.diff(coefficients, prepend=0.0)  # the count's noise weights: row t minus t - 1
    return _GaussianNoise(
        np.asarray(factorization.release_variances(), dtype=np.float64) * scale,
        sigma * sigma * np.cumsum(steps * steps),
        horizon,
        lambda t: (coefficients[:t][::-1], np.full(t, sigma)),
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
    unit_multiplier: int = 1,
    event_l2_squared: int | None = None,
    touched: int | None = None,
) -> Plan:
    """Expected accuracy of a zCDP counter; ``sensitivity`` is one event's L2 bound
    ``Delta_2``; the plan's ``epsilon`` is the (epsilon, ``delta``)-DP the loss implies
    (rounded up). With a privacy unit of ``unit_multiplier`` ``M`` records, the noise is
    calibrated on ``L2^2 = M^2 x`` the event's integer ``Delta_2^2``, as the engine does
    (squaring ``M x Delta_2`` first would plan a larger bound than the stream's when
    ``Delta_2`` is not the root of an integer).

    A stream's plan passes the worker's exact figures: ``event_l2_squared``, the event's
    integer ``Delta_2^2`` (else the largest integer at most ``sensitivity^2``), and for blt
    ``touched``, the most counters one event (or unit) changes
    (:func:`~streamdp.continual.lattice_blt.counters_touched`; else ``L2^2``, which bounds it
    too: every changed counter adds at least 1 to it)."""
    if objective not in zcdp_objectives_for(mechanism):
        raise ConfigError(
            f"objective {objective!r} does not apply to {mechanism!r} under zCDP; it takes "
            f"{' or '.join(zcdp_objectives_for(mechanism))}"
        )
    if branching is not None and mechanism != "kary_gls":
        raise ConfigError(f"branching (k) applies to kary_gls only, not {mechanism!r}")
    if isinstance(buffers, bool) or not isinstance(buffers, int) or not 1 <= buffers <= 8:
        raise ConfigError(f"buffers must be an integer between 1 and 8, got {buffers!r}")
    check_plan_horizon(horizon)
    loss = ZcdpLoss.of(rho)
    variance_scale(float(loss.rho), float(sensitivity))  # refuses a non-finite or <= 0 bound
    event_squared = l2_squared_of(sensitivity) if event_l2_squared is None else event_l2_squared
    budget = GaussianBudget(loss.rho, event_squared * unit_multiplier**2)
    planned_l2 = math.sqrt(budget.l2_squared)  # the bound the plan is for (and says)
    noise = _gaussian_noise(
        mechanism,
        objective,
        horizon,
        budget,
        branching,
        buffers,
        budget.l2_squared if touched is None else touched,
    )
    total, count = noise.total, noise.count
    releases = []
    for t in points if points is not None else report_points(horizon):
        if not 1 <= t <= horizon:
            raise ConfigError(f"release t must be in 1..{horizon}, got {t}")
        bias = 0.0 if noise.bias is None else float(noise.bias[t - 1])
        std = math.sqrt(float(total[t - 1]))
        # the BLT's releases also carry the lattice's rounding bias (its declared sd adds it)
        error95 = gaussian_error_bound(*noise.terms(t)) + bias
        releases.append(ReleaseAccuracy(t=t, total_std=std, error95=error95))
    return Plan(
        mechanism=mechanism,
        objective=objective,
        horizon=horizon,
        epsilon=loss.epsilon_at(delta),
        sensitivity=planned_l2,
        noise="discrete-gaussian",
        mean_variance=float(total.mean()),
        max_variance=float(total.max()),
        releases=releases,
        mean_count_variance=float(count.mean()),
        max_count_variance=float(count.max()),
        state_values_per_counter=noise.state,
        # the BLT works with d encoding and d decoding buffers and its running total
        working_state_per_counter=2 * buffers + 1 if mechanism == "blt" else None,
        branching=noise.branching,
        level_budgets=noise.budgets,
        privacy=loss.as_dict(delta),
    )


def compare_definitions(
    horizon: int,
    epsilon: float,
    sensitivity: float,
    l2_sensitivity: float,
    delta: Fraction | float = DEFAULT_DELTA,
    *,
    unit_multiplier: int = 1,
    event_l2_squared: int | None = None,
    touched: int | None = None,
) -> list[Plan]:
    """Every pure-DP mechanism at ``epsilon`` (L1 bound ``sensitivity``, discrete Laplace) and
    every zCDP mechanism at the largest rho that is (``epsilon``, ``delta``)-DP (L2 bound
    ``l2_sensitivity`` of one event, ``unit_multiplier`` records per unit): the two definitions
    at matched (epsilon, delta). ``event_l2_squared`` and ``touched``: a stream's exact figures
    (:func:`plan_zcdp`)."""
    rho = rho_for_epsilon(epsilon, delta)
    pure = compare(horizon, epsilon, sensitivity)
    for result in pure:
        object.__setattr__(result, "privacy", PureLoss.of(epsilon).as_dict(delta))
    return pure + [
        plan_zcdp(
            m,
            o,
            horizon,
            rho,
            l2_sensitivity,
            delta=delta,
            points=[horizon],
            unit_multiplier=unit_multiplier,
            event_l2_squared=event_l2_squared,
            touched=touched,
        )
        for m, o in ZCDP_COMPARED
    ]
