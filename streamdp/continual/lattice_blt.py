"""A BLT factorization on a lattice: the maths that lets the worker release a BLT counter under
rho-zCDP with every published value a function of the noisy values alone (issue 27; DESIGN §2,
"Publish from noisy values only").

The mechanism of :mod:`streamdp.continual.matrix_factorization` releases ``B y`` with noisy
values ``y = C x + z``. With discrete noise ``z`` that is private only if ``C x`` lies on the
noise's lattice: a real ``C x`` would show through ``y``'s fractional part. So here:

- ``C``'s parameters are dyadic (:class:`LatticeBLT`: ``theta_j = m_j / 2^P``,
  ``w_j = n_j / 2^P``, ``P = PARAMETER_BITS``), and ``F(x)``, an integer-valued stand-in for
  ``C x`` in units of ``2^-G`` (``G = GRID_BITS``), is computed with the BLT's buffers in exact
  integer arithmetic, each buffer update and the output rounded to the unit (half up):

      S_j(1) = 0,   F_t = x_t 2^G + round(sum_j n_j S_j(t) / 2^P),
      S_j(t+1) = round(m_j S_j(t) / 2^P) + x_t 2^G.

  ``F`` is deterministic, O(d) integers of state per counter, and within ``E`` of ``C x``:
  each buffer is within ``1 / (2 (1 - theta_j))`` units of its exact value (the rounding
  errors decay geometrically), so ``|F_t - (C x)_t 2^G| <= 1/2 + sum_j |w_j| / (2 (1 -
  theta_j))`` units (:attr:`LatticeBLT.error_units`).
- The noise is the discrete Gaussian on the same lattice, ``z_t`` integers in units of
  ``2^-G``; the noisy values are the integers ``y_t = F_t + z_t`` (drawn once, stored).
- One event changes the counts of at most ``k`` counters (``k`` at most the L1 bound) in one
  period ``p``, by a vector ``v`` with ``||v||_2 <= Delta_2``. Then ``F(x')- F(x)`` is an integer
  vector with ``||F(x') - F(x)||_2 <= 2^G (sens(C) Delta_2 + 2 E sqrt(N k))`` (the exact part
  ``C e_p v`` has norm at most ``sens(C) ||v||_2``, ``sens(C)`` the longest column, the first;
  the rounding differs on the ``N - p + 1`` releases from ``p`` on of the ``k`` counters only).
  So ``y`` is the multivariate discrete Gaussian mechanism with that integer-vector
  sensitivity: ``rho``-zCDP for ``sigma^2 >= L^2 / (2 rho)`` (Canonne, Kamath and Steinke
  2020, Theorem 4, whose proof holds for any integer shift of the given L2 norm),
  :func:`lattice_sigma` rounds sigma up until that holds exactly.
- Releases are ``B y`` with ``B = A C^{-1}``: :meth:`LatticeBLT.decode_step` solves ``C u = y``
  row by row in float64 (``u_t = y_t - sum_j w_j U_j(t)``, ``U_j(t+1) = theta_j U_j(t) +
  u_t``) and adds ``u_t 2^-G`` to the released total: a fixed sequence of float operations on
  ``y`` alone. Exactly, ``B y = A x + B (F - C x) + B z``: the declared variance is that of
  ``B z`` (:meth:`LatticeBLT.release_variances`), and ``B (F - C x)`` is a bias of at most
  ``E sum_k |b_k|`` counts (:meth:`LatticeBLT.rounding_bounds`), which the declared standard
  deviation adds like the k-ary mechanisms' fixed-point rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdp.continual.blt_factorization import BLTParameters
from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.exact_float import float_sqrt_at_least
from streamdp.continual.matrix_factorization import series_inverse
from streamdp.errors import ConfigError
from streamdp.noise.gaussian import MAX_GAUSSIAN_SIGMA, MIN_GAUSSIAN_SIGMA

FloatArray = npt.NDArray[np.float64]
#: Bits of the dyadic BLT parameters.
PARAMETER_BITS = 40
#: The lattice: noisy values are integers in units of 2^-GRID_BITS counts.
GRID_BITS = 20
#: The largest count of one counter in one period the lattice encoding takes: beyond it a noisy
#: value could leave int64 (it is stored as one). A count beyond it is encoded as the limit
#: (:meth:`LatticeBLT.encode_step`).
MAX_PERIOD_COUNT = 2**31


def _round_shift(value: int, bits: int) -> int:
    """``value / 2^bits`` rounded half up, exactly (Python integers)."""
    return (value + (1 << (bits - 1))) >> bits


@dataclass(frozen=True)
class LatticeBLT:
    """A BLT ``C`` with dyadic parameters (``theta_j = m[j] / 2^P``, ``w_j = n[j] / 2^P``),
    its lattice encoding and its float decoding (see the module)."""

    m: tuple[int, ...]
    n: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.m or len(self.m) != len(self.n):
            raise ConfigError("a lattice BLT needs one (theta, w) pair per buffer, at least one")
        if not all(0 < m < (1 << PARAMETER_BITS) for m in self.m):
            raise ConfigError("a lattice BLT's theta must lie strictly inside (0, 1)")

    @classmethod
    def from_parameters(cls, parameters: BLTParameters) -> LatticeBLT:
        """The nearest dyadic BLT to ``parameters`` (to ``2^-P``; theta kept inside (0, 1))."""
        scale = 1 << PARAMETER_BITS
        m = tuple(min(max(round(float(t) * scale), 1), scale - 1) for t in parameters.theta)
        n = tuple(round(float(w) * scale) for w in parameters.w)
        return cls(m, n)

    @property
    def buffers(self) -> int:
        return len(self.m)

    @property
    def theta(self) -> FloatArray:
        """The dyadic theta_j (exact in float64: at most 40 significant bits)."""
        return np.array([m / (1 << PARAMETER_BITS) for m in self.m])

    @property
    def w(self) -> FloatArray:
        """The dyadic w_j (exact in float64)."""
        return np.array([n / (1 << PARAMETER_BITS) for n in self.n])

    @cached_property
    def error_units(self) -> Fraction:
        """``E``: the most ``F_t`` can differ from ``(C x)_t 2^G``, in units (exact)."""
        total = Fraction(1, 2)
        for m, n in zip(self.m, self.n, strict=True):
            theta = Fraction(m, 1 << PARAMETER_BITS)
            total += abs(Fraction(n, 1 << PARAMETER_BITS)) / (2 * (1 - theta))
        return total

    def coefficients(self, horizon: int) -> FloatArray:
        """First column of ``C`` (shape ``(N,)``, float64)."""
        return BLTParameters(self.theta, self.w).coefficients(horizon)

    def b_coefficients(self, horizon: int) -> FloatArray:
        """First column of ``B = A C^{-1}`` (shape ``(N,)``)."""
        return np.cumsum(series_inverse(self.coefficients(horizon)))

    def sensitivity_squared_bound(self, horizon: int) -> Fraction:
        """An upper bound on ``sens(C)^2 = sum_k c_k^2`` (the first column), proved in exact
        arithmetic: with ``c_0 = 1`` and ``c_k = sum_j w_j theta_j^(k-1)``,

            sum_{k < N} c_k^2 = 1 + sum_{i,j} w_i w_j G(theta_i theta_j),
            G(r) = sum_{k=0}^{N-2} r^k = (1 - r^(N-1)) / (1 - r),

        each ``r^(N-1)`` enclosed between two multiples of ``2^-POWER_BITS``
        (:func:`_power_bounds`) and each term bounded above by the side its sign calls for.
        Above the exact sum by at most about ``log2(N) sum_{i,j} |w_i w_j| / (1 - theta_i
        theta_j) 2^-POWER_BITS``, with no float in the argument (an audit built lattices with
        strong cancellation where the float sum with a 1e-6 margin used before fell 1.9e-5
        below the exact value)."""
        n = check_horizon(horizon)
        total = Fraction(1)
        if n == 1:
            return total
        denominator = 1 << (2 * PARAMETER_BITS)
        for m_i, n_i in zip(self.m, self.n, strict=True):
            for m_j, n_j in zip(self.m, self.n, strict=True):
                weight = n_i * n_j
                if weight == 0:
                    continue
                product = m_i * m_j  # r = product / 2^(2P), inside (0, 1)
                low, high = _power_bounds(product, 2 * PARAMETER_BITS, n - 1)
                power = low if weight > 0 else high  # G falls as r^(N-1) rises
                geometric = (1 - power) / Fraction(denominator - product, denominator)
                total += Fraction(weight, denominator) * geometric
        return total

    # ------------------------------------------------------------------ the mechanism
    def encode_step(
        self, buffers: list[list[int]], counts: list[int]
    ) -> tuple[list[int], list[list[int]]]:
        """One period: ``F_t`` of every counter (integers, units of ``2^-G``) from the buffers
        before it (``d`` lists of one integer per counter) and the period's exact ``counts``;
        returns ``(F_t, buffers after)``. Raw-data state: protect it like the input.

        A count beyond ``+-MAX_PERIOD_COUNT`` is encoded as the limit. Clipping each count is a
        contraction (two counts differ by no more after it than before), so one event still
        moves the encoding by at most its own contribution and the privacy argument above holds;
        such a period's release is biased toward the limit, a bias its declared standard
        deviation does not carry. Refusing the period instead would stop every later release at
        a moment the data decides (and a message naming the count would publish it)."""
        limit = MAX_PERIOD_COUNT
        shifted = [min(max(count, -limit), limit) << GRID_BITS for count in counts]
        out = []
        for c, base in enumerate(shifted):
            acc = 0
            for j in range(self.buffers):
                acc += self.n[j] * buffers[j][c]
            out.append(base + _round_shift(acc, PARAMETER_BITS))
        after = [
            [
                _round_shift(self.m[j] * buffers[j][c], PARAMETER_BITS) + shifted[c]
                for c in range(len(counts))
            ]
            for j in range(self.buffers)
        ]
        return out, after

    def decode_step(
        self, decode: list[list[float]], total: list[float], noisy: list[int]
    ) -> tuple[list[float], list[list[float]]]:
        """One release from the noisy values ``y_t`` (integers, units): solves ``C u = y`` one
        row on (``decode``: ``d`` lists of one float per counter) and returns ``(released
        running totals in counts, decode buffers after)``; float64 operations on ``y`` in one
        fixed order."""
        theta, w = self.theta.tolist(), self.w.tolist()
        scale = 2.0**-GRID_BITS
        released = []
        after = [list(row) for row in decode]
        for c, value in enumerate(noisy):
            u = float(value)
            for j in range(self.buffers):
                u -= w[j] * decode[j][c]
            for j in range(self.buffers):
                after[j][c] = theta[j] * decode[j][c] + u
            released.append(total[c] + u * scale)
        return released, after

    # ------------------------------------------------------------------ what it declares
    def release_variances(self, horizon: int, sigma_units: float) -> FloatArray:
        """``Var`` of each released running total, counts^2, ``t = 1..N``: ``B z`` with
        ``z`` of variance ``sigma^2`` units^2 (the discrete Gaussian's, equal to sigma^2 in
        float64 at the sigmas used here: thousands of units)."""
        b = self.b_coefficients(horizon)
        out: FloatArray = (sigma_units * 2.0**-GRID_BITS) ** 2 * np.cumsum(b * b)
        return out

    def rounding_bounds(self, horizon: int) -> FloatArray:
        """A bound on the bias ``|(B (F - C x))_t|`` of each release, counts, ``t = 1..N``:
        ``E sum_{k < t} |b_k| 2^-G``."""
        b = self.b_coefficients(horizon)
        out: FloatArray = float(self.error_units) * 2.0**-GRID_BITS * np.cumsum(np.abs(b))
        return out


def counters_touched(l1_bound: float, width: int) -> int:
    """The most counters of a ``width``-counter bank one event (or one privacy unit's records)
    can change, given its L1 bound: each counter it changes moves by an integer, so by at least
    1, and no more counters than the bank holds. The worker's, the spec check's and the
    planner's lattice BLT sigma all take ``touched`` from here, so they are one figure."""
    return max(1, min(int(l1_bound), int(width)))


def lattice_sigma(
    blt: LatticeBLT, horizon: int, rho: Fraction, l2_squared: int, touched: int
) -> float:
    """The discrete Gaussian sigma (units of ``2^-G``) that makes the lattice BLT ``rho``-zCDP
    for events of squared L2 bound ``l2_squared`` touching at most ``touched`` counters:
    ``sigma^2 >= L^2 / (2 rho)``, ``L = 2^G (sens(C) Delta_2 + 2 E sqrt(N touched))``, with every
    square root rounded up and the inequality checked in exact rationals."""
    if rho <= 0 or l2_squared < 1 or touched < 1:
        raise ConfigError(
            "rho, the L2 bound and the counters touched must be positive, got "
            f"rho {rho}, l2_squared {l2_squared}, touched {touched}"
        )
    unit = 1 << GRID_BITS
    exact_part = blt.sensitivity_squared_bound(horizon) * l2_squared * unit * unit
    rounding_part = Fraction(4) * blt.error_units**2 * horizon * touched
    a, b = _sqrt_up(exact_part), _sqrt_up(rounding_part)
    sigma = float_sqrt_at_least((a + b) ** 2 / (2 * rho))
    if not MIN_GAUSSIAN_SIGMA <= sigma <= MAX_GAUSSIAN_SIGMA:
        raise ConfigError(
            f"the blt mechanism needs the discrete Gaussian sigma {sigma:.6g} (units of "
            f"2^-{GRID_BITS}), outside the sampler's safe range [2^-40, 2^40]; "
            + ("raise rho" if sigma > MAX_GAUSSIAN_SIGMA else "lower rho")
        )
    return sigma


#: Bits of the fixed point in which :func:`_power_bounds` encloses a power.
POWER_BITS = 256


def _power_bounds(base: int, bits: int, exponent: int) -> tuple[Fraction, Fraction]:
    """``(low, high)`` with ``low <= (base / 2^bits)^exponent <= high``, both multiples of
    ``2^-POWER_BITS``, for ``0 < base < 2^bits <= 2^POWER_BITS``: exponentiation by squaring
    on integers, every product rounded down for ``low`` and up for ``high``."""
    one = 1 << POWER_BITS
    factor_low = factor_high = base << (POWER_BITS - bits)  # exact
    low = high = one
    while exponent:
        if exponent & 1:
            low = (low * factor_low) >> POWER_BITS
            high = -((-high * factor_high) >> POWER_BITS)
        exponent >>= 1
        if exponent:
            factor_low = (factor_low * factor_low) >> POWER_BITS
            factor_high = -((-factor_high * factor_high) >> POWER_BITS)
    return Fraction(low, one), Fraction(high, one)


def _sqrt_up(value: Fraction) -> Fraction:
    """A rational at least ``sqrt(value)`` (within one part in 2^-60 of it)."""
    scale = 1 << 60
    numerator = value.numerator * scale * scale
    root = math.isqrt(numerator // value.denominator) + 1
    return Fraction(root, scale)
