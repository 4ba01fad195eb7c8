"""Streaming matrix-factorization counters under rho-zCDP: the numerical maths (issue 27).

Workload: the running total over ``N`` periods, ``A`` (``N x N`` lower-triangular ones), so
``(A x)_t = x_1 + ... + x_t``. A factorization ``A = B C`` gives the mechanism

    release = A x + B z,   z ~ N(0, sigma^2 sens(C)^2 I_N),   sigma^2 = Delta_2^2 / (2 rho),

(the Gaussian mechanism on ``C x`` post-processed by ``B``), which is rho-zCDP when one
participant changes one ``x_t`` by at most ``Delta_2`` (L2). ``sens(C)`` is the largest column
L2 norm of ``C``. The release at ``t`` has error variance

    Var_t = sigma^2 * sens(C)^2 * ||row t of B||^2,

and everything here is reported per unit ``sigma^2`` (``rho = 1/2``, ``Delta_2 = 1``; multiply
by :func:`variance_scale` for other budgets). ``mean_variance`` averages ``Var_t`` over
``t = 1..N``, ``max_variance`` is the worst ``t``.

Every matrix here is lower-triangular Toeplitz, held as its first column (coefficients
``c_0..c_{N-1}``, ``c_0 = 1``). Then ``B = A C^{-1}`` is Toeplitz too, with coefficients ``b``
the prefix sums of the power-series inverse of ``c``; ``||row t of B||^2 = sum_{k<t} b_k^2``
and ``sens(C)^2 = sum_{k<N} c_k^2`` (the first column is the longest). ``Var_t`` is therefore
non-decreasing in ``t``: the worst release is always the last one, ``Var_N``, a smooth function
of the coefficients, so the "max" objective needs no soft-max surrogate.

Three factorizations:

* square-root Toeplitz, ``C = B = A^{1/2}``, ``c_k = binom(2k, k) / 4^k``
  (Fichtenberger, Henzinger, Upadhyay 2023, "Constant matters: fine-grained error bound on
  differentially private continual observation"; Henzinger, Upadhyay, Upadhyay 2023,
  "Almost tight error bounds on differentially private continual counting");
* buffered linear Toeplitz (BLT) ``C`` with ``d`` buffers (Dvijotham, McMahan, Pillutla,
  Steinke, Thakurta 2024, "Efficient and near-optimal noise generation for streaming
  differential privacy"): :mod:`streamdp.continual.blt_factorization`. The noise ``B z``
  streams with ``d + 1`` numbers of state per counter;
* the optimal Toeplitz ``C`` (all ``N - 1`` coefficients free) for the mean or the worst
  variance, by L-BFGS-B with an analytic gradient: :func:`optimise_toeplitz`. (Optimising the
  whole factorization against a workload is Denisov, McMahan, Rush, Smith, Thakurta 2022,
  "Improved differential privacy for SGD via optimal private linear operators on adaptive
  streams"; here restricted to Toeplitz.)

Pure functions and frozen dataclasses; arrays handed out are read-only. No randomness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize
from scipy.signal import fftconvolve

from streamdp.continual.counter_checks import check_horizon
from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
ComplexArray = npt.NDArray[np.complex128]
MFObjective = Literal["mean", "max"]

OBJECTIVES: tuple[MFObjective, ...] = ("mean", "max")
#: The objective value of a factorization whose inverse overflows (the line search backs off).
OVERFLOW_PENALTY = 1e30


# --------------------------------------------------------------------------- validation


def check_objective(objective: str) -> MFObjective:
    """``objective`` as ``"mean"`` or ``"max"``, else :class:`ConfigError`."""
    if objective == "mean":
        return "mean"
    if objective == "max":
        return "max"
    raise ConfigError(
        f"objective must be one of {', '.join(OBJECTIVES)} (mean or worst release variance), "
        f"got {objective!r}"
    )


def frozen(values: npt.ArrayLike) -> FloatArray:
    """A read-only float64 copy of ``values`` (the arrays this package hands out)."""
    out: FloatArray = np.array(values, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


def variance_scale(rho: float, l2_sensitivity: float = 1.0) -> float:
    """``sigma^2 = Delta_2^2 / (2 rho)``: multiply the per-unit variances of this module by it
    to get the variance of a rho-zCDP release whose one participant moves one ``x_t`` by at
    most ``l2_sensitivity``."""
    if not (isinstance(rho, int | float) and math.isfinite(rho) and rho > 0):
        raise ConfigError(f"rho must be a finite number > 0 (zCDP budget), got {rho!r}")
    if not (
        isinstance(l2_sensitivity, int | float)
        and math.isfinite(l2_sensitivity)
        and l2_sensitivity > 0
    ):
        raise ConfigError(f"l2_sensitivity must be a finite number > 0, got {l2_sensitivity!r}")
    return float(l2_sensitivity) ** 2 / (2.0 * float(rho))


# --------------------------------------------------------------------------- Toeplitz algebra


def series_inverse(coefficients: npt.ArrayLike) -> FloatArray:
    """The first ``N`` coefficients of ``1 / c(x)``, i.e. the first column of ``C^{-1}`` for
    the lower-triangular Toeplitz ``C`` with first column ``c`` (shape ``(N,)``, ``c_0 != 0``).

    Newton's iteration ``r <- r (2 - c r) mod x^{2m}`` with FFT products: O(N log N)."""
    c = np.asarray(coefficients, dtype=np.float64)
    if c.ndim != 1 or c.shape[0] < 1 or c[0] == 0.0:
        raise ConfigError(
            f"coefficients must be a non-empty 1-D array with c_0 != 0, got shape {c.shape}"
        )
    n = c.shape[0]
    r = np.array([1.0 / c[0]])
    m = 1
    while m < n:
        m = min(2 * m, n)
        correction = -np.asarray(fftconvolve(c[:m], r)[:m], dtype=np.float64)
        correction[0] += 2.0
        r = np.asarray(fftconvolve(r, correction)[:m], dtype=np.float64)
    return r


def sqrt_toeplitz_coefficients(horizon: int) -> FloatArray:
    """First column of ``A^{1/2}`` (shape ``(N,)``): ``c_k = binom(2k, k) / 4^k``, the
    coefficients of ``(1 - x)^{-1/2}``, by ``c_k = c_{k-1} (2k - 1) / (2k)``."""
    n = check_horizon(horizon)
    k = np.arange(1, n, dtype=np.float64)
    c = np.ones(n, dtype=np.float64)
    c[1:] = np.cumprod((2.0 * k - 1.0) / (2.0 * k))
    return c


@dataclass(frozen=True, eq=False)
class ToeplitzFactorization:
    """``A = B C`` with ``C`` lower-triangular Toeplitz, first column ``coefficients``
    (shape ``(N,)``, ``c_0 = 1``; scaling ``C`` never changes a variance, so ``c_0`` is fixed).

    Derived (cached, read-only): ``b_coefficients`` (first column of ``B = A C^{-1}``),
    ``sensitivity_squared`` (``sens(C)^2``), :meth:`release_variances` (``Var_t`` per unit
    ``sigma^2``, shape ``(N,)``), ``mean_variance`` and ``max_variance``.
    """

    name: str
    coefficients: FloatArray

    def __post_init__(self) -> None:
        c = np.asarray(self.coefficients, dtype=np.float64)
        if c.ndim != 1 or c.shape[0] < 1:
            raise ConfigError(
                f"{self.name}: coefficients must be a non-empty 1-D array (the first column of "
                f"C, one per release), got shape {c.shape}"
            )
        if not np.all(np.isfinite(c)):
            raise ConfigError(f"{self.name}: coefficients must be finite")
        if abs(c[0] - 1.0) > 1e-12:
            raise ConfigError(
                f"{self.name}: coefficients must start with c_0 = 1 (divide them by c_0), "
                f"got c_0 = {c[0]!r}"
            )
        object.__setattr__(self, "coefficients", frozen(c))

    @property
    def horizon(self) -> int:
        """``N``, the number of releases."""
        return int(self.coefficients.shape[0])

    @cached_property
    def b_coefficients(self) -> FloatArray:
        """First column of ``B = A C^{-1}`` (shape ``(N,)``): prefix sums of ``1 / c(x)``."""
        return frozen(np.cumsum(series_inverse(self.coefficients)))

    @cached_property
    def sensitivity_squared(self) -> float:
        """``sens(C)^2 = sum_k c_k^2``: the squared L2 norm of the first (longest) column."""
        return float(self.coefficients @ self.coefficients)

    @cached_property
    def _variances(self) -> FloatArray:
        b = self.b_coefficients
        return frozen(self.sensitivity_squared * np.cumsum(b * b))

    def release_variances(self) -> FloatArray:
        """``Var_t = sens(C)^2 ||row t of B||^2`` for ``t = 1..N`` (shape ``(N,)``), per unit
        ``sigma^2`` (read-only)."""
        return self._variances

    @cached_property
    def mean_variance(self) -> float:
        """Mean of :meth:`release_variances` over ``t = 1..N`` (per unit ``sigma^2``)."""
        return float(self._variances.mean())

    @cached_property
    def max_variance(self) -> float:
        """Worst release variance (per unit ``sigma^2``); always the last release's."""
        return float(self._variances.max())


def sqrt_toeplitz(horizon: int) -> ToeplitzFactorization:
    """The square-root factorization ``B = C = A^{1/2}`` for ``horizon`` releases."""
    return ToeplitzFactorization("sqrt_toeplitz", sqrt_toeplitz_coefficients(horizon))


def objective_weights(objective: MFObjective, horizon: int) -> FloatArray:
    """``objective = weights @ b^2 * sens^2``: ``sum_t sum_{k<t} b_k^2 / N`` puts weight
    ``(N - k) / N`` on ``b_k^2`` (mean); the last release weights every ``b_k^2`` by 1 (max)."""
    if objective == "mean":
        out: FloatArray = (horizon - np.arange(horizon, dtype=np.float64)) / horizon
        return out
    return np.ones(horizon, dtype=np.float64)


# --------------------------------------------------------------------------- optimal Toeplitz


def _toeplitz_value_and_gradient(free: FloatArray, weights: FloatArray) -> tuple[float, FloatArray]:
    """``f(c) = sens(C)^2 * weights @ b^2`` and ``df/dc_{1..N-1}`` (``c_0 = 1``).

    With ``r = 1 / c(x)`` and ``b = cumsum(r)``: ``dT/db = 2 weights b``,
    ``dT/dr_k = sum_{m >= k} dT/db_m``, and ``dr = -(r * r) * dc`` (truncated products), so
    ``dT/dc_i = -sum_{k >= i} dT/dr_k (r * r)_{k-i}``; all FFT products, O(N log N)."""
    n = weights.shape[0]
    c = np.concatenate([[1.0], free])
    with np.errstate(all="ignore"):
        r = series_inverse(c)
        b = np.cumsum(r)
        sens = float(c @ c)
        total = float(weights @ (b * b))
        grad_r = np.cumsum((2.0 * weights * b)[::-1])[::-1]
        r_squared = np.asarray(fftconvolve(r, r)[:n], dtype=np.float64)
        grad_c = -np.asarray(fftconvolve(grad_r[::-1], r_squared)[:n][::-1], dtype=np.float64)
        gradient = 2.0 * c * total + sens * grad_c
    value = sens * total
    if not (math.isfinite(value) and np.all(np.isfinite(gradient))):
        return OVERFLOW_PENALTY, np.zeros_like(free)
    return value, np.asarray(gradient[1:], dtype=np.float64)


def _optimise_toeplitz_from(start: FloatArray, weights: FloatArray) -> tuple[float, FloatArray]:
    if start.shape[0] == 1:
        return float(weights @ np.ones(1)), start
    result = minimize(
        _toeplitz_value_and_gradient,
        start[1:],
        args=(weights,),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 5000, "maxcor": 30, "ftol": 1e-15, "gtol": 1e-12},
    )
    free = np.asarray(result.x, dtype=np.float64)
    return _toeplitz_value_and_gradient(free, weights)[0], np.concatenate([[1.0], free])


def optimise_toeplitz(horizon: int, objective: str = "mean") -> ToeplitzFactorization:
    """The lower-triangular Toeplitz ``C`` (``c_0 = 1``, ``c_1..c_{N-1}`` free) minimising the
    mean (``"mean"``) or worst (``"max"``) release variance for exactly ``horizon`` releases.

    L-BFGS-B from ``A^{1/2}`` with the analytic gradient of
    :func:`_toeplitz_value_and_gradient` (O(N log N) per evaluation). For ``"max"`` it also
    starts from the mean-optimal ``C`` and keeps the better; numerically both return to
    ``A^{1/2}`` (its gradient vanishes), so the square root is the max-optimal Toeplitz.
    Deterministic and cached (on the validated arguments).
    """
    return _optimise_toeplitz(check_horizon(horizon), check_objective(objective))


@lru_cache(maxsize=64)
def _optimise_toeplitz(n: int, obj: MFObjective) -> ToeplitzFactorization:
    weights = objective_weights(obj, n)
    starts = [sqrt_toeplitz_coefficients(n)]
    if obj == "max":
        starts.append(_optimise_toeplitz(n, "mean").coefficients)
    best_value, best_c = math.inf, starts[0]
    for start in starts:
        value, c = _optimise_toeplitz_from(np.asarray(start, dtype=np.float64), weights)
        if value < best_value:
            best_value, best_c = value, c
    return ToeplitzFactorization(f"optimal_toeplitz_{obj}", best_c)
