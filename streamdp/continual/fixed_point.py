"""Decoding k-ary node noise in exact fixed point, so that every release is a deterministic
function of the noisy node values alone (DESIGN §2 "Publish from noisy values only").

Why: release ``t`` of a k-ary counter is ``s_t + n_t`` with ``n = M z`` (DESIGN §3). In exact
arithmetic this equals ``(M y)_t`` for the noisy nodes ``y = R a + z``, so it depends on ``a``
and ``z`` only through ``y``. In float64 it does not: ``fl(s_t + fl(M z))`` depends on how
``y`` splits into count and noise, and the low bits of a release identify the count (issue 25
measured epsilon >= 5.86 against a claimed 1). The test of a correct implementation is the
coupling: inputs ``a`` with noise ``z`` and ``a + e`` with noise ``z - R e`` (the same ``y``)
must give bit-identical releases, for every integer ``e``.

How: the decoder ``D`` below maps integer node noise to integer multiples of
``2^-FRACTION_BITS`` (the public grid) and is exactly *shift-equivariant*:
``D(z + R e) = D(z) + A e`` for every integer period vector ``e`` (``A`` the prefix sums).
Then ``s_t + D(z)_t = D(y)_t`` exactly: the release is a function of ``y`` alone, computed
exactly in integers, and only then turned into a float (a deterministic function of that exact
value). The GLS two-pass estimator (:func:`streamdp.continual.kary_gls.gls_estimate`) is made
equivariant by rounding only quantities that do not move under the shift:

- bottom-up ``u_v = cu_v + round(beta_v (y_v - cu_v))`` with ``cu_v`` the children's sum and
  ``beta_v = V_v / v_v``: ``y_v - cu_v`` is invariant, so ``u_v`` moves by the subtree's shift;
- top-down ``x_c = u_c + round(g_c D_v)`` with ``D_v = x_v - cu_v`` (invariant) and
  ``g_c = V_c / S_v``; the last child of each parent takes ``D_v`` minus its siblings' shares,
  so children sum exactly to their parent and prefix sums add no rounding.

Every other step is an integer addition. The float products ``beta * diff`` and ``g * D`` are
computed from invariant integers, so their rounding is a function of ``y`` too. Negative-digit
decoding (:func:`digits_fixed`) is an integer sum of node noise: exact, no rounding at all.

Effect on accuracy: the fixed-point decoder differs from the exact-arithmetic GLS estimate by
at most :func:`gls_rounding_bound` (a public number, about ``1e-6`` at ``N = 4095``), which
the declared standard deviations include (:mod:`streamdp.continual.factored_counter`).

Values are int64 when a bound on every intermediate (from the noise, never from the counts)
fits, else exact Python integers (numpy object arrays): both give the same integers.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from streamdp.continual.kary_gls import gls_bottom_up

FRACTION_BITS = 32
"""Fixed-point fraction bits: k-ary GLS releases are exact multiples of ``2^-32`` before their
conversion to float64 (the public grid)."""

FIXED_ONE = 1 << FRACTION_BITS

IntLike = npt.NDArray[np.int64] | npt.NDArray[np.object_]
FloatArray = npt.NDArray[np.float64]

_INT64_HEADROOM = 1 << 62


def _uses_int64(z: list[npt.NDArray[np.int64]], branching: int) -> bool:
    """True when every intermediate of :func:`gls_fixed_estimate` fits int64.

    Every bottom-up value is bounded by the column's sum of ``|z|`` (plus one per rounding),
    each top-down value by ``2 L + 1`` times that, and a prefix by ``k L`` of those (children
    sum to their parent exactly). Decided from the noise only; both paths give equal integers.
    """
    levels = len(z)
    nodes = sum(int(part.shape[0]) for part in z)
    column_mass = 0
    for part in z:
        if part.size:
            column_mass += int(np.abs(part).max()) * int(part.shape[0])
    bound = (branching * levels * (2 * levels + 1) + 2) * (column_mass + nodes + 1) * FIXED_ONE
    return bound < _INT64_HEADROOM


def _as_fixed(values: npt.NDArray[np.int64], exact: bool) -> IntLike:
    """``values * 2^FRACTION_BITS`` as int64 or (``exact``) Python integers."""
    if exact:
        out: IntLike = np.asarray(values).astype(object) * FIXED_ONE
        return out
    return np.asarray(values, dtype=np.int64) << FRACTION_BITS


def _round_product(coefficient: FloatArray, invariant: IntLike, exact: bool) -> IntLike:
    """``rint(coefficient * float(invariant))`` as integers of the same kind as ``invariant``.

    A deterministic function of ``invariant``: its conversion to float64 and the product are
    correctly rounded (IEEE 754), ``rint`` rounds half to even.
    """
    shape = (-1,) + (1,) * (invariant.ndim - 1)
    product = np.rint(coefficient.reshape(shape) * invariant.astype(np.float64))
    if exact:
        return np.array([int(v) for v in product.ravel()], dtype=object).reshape(product.shape)
    return product.astype(np.int64)


def _group_sums(values: IntLike, branching: int) -> IntLike:
    """Exact sums of consecutive groups of ``branching`` rows (the last group may be short)."""
    starts = np.arange(0, values.shape[0], branching)
    out: IntLike = np.add.reduceat(values, starts, axis=0)
    return out


def gls_fixed_estimate(
    z: list[npt.NDArray[np.int64]], node_var: list[FloatArray], branching: int
) -> IntLike:
    """Shift-equivariant fixed-point GLS estimate of every period from integer node values.

    Args:
        z: per level, integer node values (noise, or noisy nodes), shape ``(B_l, width)``.
        node_var: per level, the nodes' noise variances, shape ``(B_l,)`` (the weights).
        branching: ``k``.

    Returns:
        shape ``(N, width)``: period estimates in units of ``2^-FRACTION_BITS`` (int64, or
        Python integers when int64 could overflow). Exactly
        ``D(z + R e) = D(z) + e * 2^FRACTION_BITS`` for integer ``e``; within
        :func:`gls_rounding_bound`-sized rounding of ``(R'WR)^-1 R'W z``.
    """
    exact = not _uses_int64(z, branching)
    V, S = gls_bottom_up(node_var, branching)
    u: list[IntLike] = [_as_fixed(z[0], exact)]
    child_sums: list[IntLike | None] = [None]
    for level in range(1, len(z)):
        cu = _group_sums(u[-1], branching)
        child_sums.append(cu)
        beta = V[level] / np.asarray(node_var[level], dtype=np.float64)
        u.append(cu + _round_product(beta, _as_fixed(z[level], exact) - cu, exact))
    estimate = u[-1]  # under a virtual root the top blocks keep their own estimates
    for level in range(len(z) - 1, 0, -1):
        children = V[level - 1].shape[0]
        parent_of = np.arange(children) // branching
        gain = V[level - 1] / S[level][parent_of]
        sums = child_sums[level]
        assert sums is not None
        residual = estimate - sums  # invariant under the shift
        shares = _round_product(gain, residual[parent_of], exact)
        # children sum exactly to their parent: the last child takes what rounding left
        last_child = np.minimum((np.arange(residual.shape[0]) + 1) * branching, children) - 1
        shares[last_child] += residual - _group_sums(shares, branching)
        estimate = u[level - 1] + shares
    return estimate


def digits_fixed(decoded_integers: npt.NDArray[np.int64]) -> IntLike:
    """Negative-digit noise (already exact integers) in units of ``2^-FRACTION_BITS``."""
    values = np.asarray(decoded_integers, dtype=np.int64)
    limit = _INT64_HEADROOM >> FRACTION_BITS
    exact = bool(values.size) and int(np.abs(values).max()) >= limit
    return _as_fixed(values, exact)


def running_totals(period_fixed: IntLike) -> IntLike:
    """Exact prefix sums of fixed-point period values along axis 0."""
    out: IntLike = np.cumsum(period_fixed, axis=0)  # type: ignore[assignment]
    return out


def split_fixed(fixed: IntLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``fixed = whole * 2^FRACTION_BITS + fraction`` with ``0 <= fraction < 2^FRACTION_BITS``
    (floor division, exact): ``(whole, fraction)`` as int64."""
    whole = fixed >> FRACTION_BITS
    fraction = fixed - (whole << FRACTION_BITS)
    return np.asarray(whole, dtype=np.int64), np.asarray(fraction, dtype=np.int64)


def fixed_to_float(whole: npt.NDArray[np.int64], fraction: npt.NDArray[np.int64]) -> FloatArray:
    """The float64 of ``whole + fraction * 2^-FRACTION_BITS``: a deterministic function of the
    exact value (both parts are; the conversion of ``whole`` and the one addition are
    correctly rounded)."""
    out: FloatArray = whole.astype(np.float64) + fraction.astype(np.float64) * (1.0 / FIXED_ONE)
    return out


def gls_rounding_bound(branching: int, blocks: tuple[int, ...]) -> float:
    """A public bound on ``|D(z)_t - n_t|`` for every prefix ``t``: how far the fixed-point
    running total of :func:`gls_fixed_estimate` is from the exact-arithmetic GLS one.

    Bottom-up, a node's error is at most its children's (weights ``1 - beta <= 1``) plus half
    a unit: ``E_l <= k E_(l-1) + 1/2``. Top-down, a child's error is at most its own bottom-up
    error, its parent's error plus the children's errors (gains sum to one), plus its share's
    rounding (the last child absorbs up to ``(k - 1) / 2`` units). A prefix is the sum of at
    most ``k`` blocks per level (children sum exactly to parents). Units ``2^-FRACTION_BITS``;
    the float products add a relative ``2^-52`` of the noise (see the module docstring).
    """
    k = branching
    levels = len(blocks)
    bottom_up = [0.0]
    for level in range(1, levels):
        bottom_up.append(min(k, blocks[level - 1]) * bottom_up[-1] + 0.5)
    top = bottom_up[-1]
    errors = [top]
    for level in range(levels - 1, 0, -1):
        child = bottom_up[level - 1]
        errors.append(errors[-1] + child + k * child + k / 2.0)
    # a prefix uses at most k blocks of each level (the top level's blocks under a virtual root)
    units = sum(max(k, blocks[-1]) * e for e in errors)
    return math.ldexp(units, -FRACTION_BITS)
