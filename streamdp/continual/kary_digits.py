"""Negative-digit maths of a k-ary block tree (Andersson, Pagh, Torkamani 2024, "Count on
your elders"): which blocks each release uses, its noise, and the noise's covariances.

Write ``t = sum_l d_l k^l`` with digits ``d_l`` in ``-(ceil(k/2) - 1) .. floor(k/2)``
(``k = 20``: ``-9..10``). From the top level down, the position moves by ``d_l`` whole blocks
of size ``k^l``, adding the blocks passed over when moving forward and subtracting them when
moving back. Each level uses at most ``floor(k/2)`` blocks, against ``k - 1`` without
subtraction. A block may end after ``t`` (period ``t + 1..`` not yet seen): only its noise is
used at ``t``, which is drawn in advance, so the release is still computable online.

Blocks are numbered as in :mod:`streamdp.continual.kary`; a block may end past the horizon
(its periods past ``N`` never occur). Units: variances in counts^2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.continual.kary_config import FloatArray, IntArray, check_branching
from streamdp.errors import ConfigError


def digit_range(branching: int) -> tuple[int, int]:
    """Smallest and largest digit of the negative-digit system: ``k = 20`` gives ``(-9, 10)``."""
    k = check_branching(branching)
    return -(-(-k // 2) - 1), k // 2


def balanced_digits(t: IntArray, branching: int, levels: int) -> IntArray:
    """Digits ``d[l, i]`` of ``t[i] = sum_l d[l, i] k^l`` in :func:`digit_range`; ``(L, n)``.

    Raises :class:`ConfigError` if ``levels`` digits do not suffice for some ``t``.
    """
    k = check_branching(branching)
    _, hi = digit_range(k)
    rest = np.asarray(t, dtype=np.int64).copy()
    out = np.zeros((levels, rest.shape[0]), dtype=np.int64)
    for level in range(levels):
        d = rest % k
        d[d > hi] -= k
        out[level] = d
        rest = (rest - d) // k
    if np.any(rest != 0):
        raise ConfigError(f"{levels} digits of base {k} do not represent every t")
    return out


def digit_levels(horizon: int, branching: int) -> int:
    """Fewest levels whose negative-digit representations cover every ``t = 1..N``."""
    k = check_branching(branching)
    _, hi = digit_range(k)
    levels = 1
    # largest representable value with L digits: hi * (k^L - 1) / (k - 1); every t below it
    # is representable (the digit system is complete on that range)
    while hi * (k**levels - 1) // (k - 1) < horizon:
        levels += 1
    return levels


@dataclass(frozen=True)
class DigitPaths:
    """Blocks each release ``t`` uses, level by level: ``[lo, hi)`` block indices, ``sign``.

    Arrays shape ``(L, n)`` for the ``n`` requested releases (``t = 0`` uses nothing).
    """

    lo: IntArray
    hi: IntArray
    sign: IntArray


def digit_paths(t: IntArray, branching: int, levels: int) -> DigitPaths:
    """The negative-digit decomposition of each ``t`` (see the module docstring)."""
    k = check_branching(branching)
    d = balanced_digits(t, k, levels)
    lo = np.zeros_like(d)
    hi = np.zeros_like(d)
    position = np.zeros(d.shape[1], dtype=np.int64)  # sum of the digits above, in periods
    for level in range(levels - 1, -1, -1):
        q = position // k**level
        lo[level] = np.minimum(q, q + d[level])
        hi[level] = np.maximum(q, q + d[level])
        position = position + d[level] * k**level
    return DigitPaths(lo=lo, hi=hi, sign=np.sign(d))


def exclusive_cumsum(values: npt.NDArray[np.float64]) -> FloatArray:
    """Sums of the first ``0, 1, .., n`` rows of ``values``: shape ``(n + 1, ...)``."""
    zero = np.zeros((1, *values.shape[1:]), dtype=np.float64)
    out: FloatArray = np.concatenate([zero, np.cumsum(values, axis=0, dtype=np.float64)])
    return out


def digits_decode(z: list[FloatArray], paths: DigitPaths) -> FloatArray:
    """``n_t = sum_l sign * (sum of z over blocks lo..hi-1)``; shape ``(n, ...)``."""
    out: FloatArray | None = None
    for level, zl in enumerate(z):
        c = exclusive_cumsum(np.asarray(zl, dtype=np.float64))
        part = c[paths.hi[level]] - c[paths.lo[level]]
        sign = paths.sign[level].reshape((-1,) + (1,) * (part.ndim - 1))
        out = sign * part if out is None else out + sign * part
    assert out is not None
    return out


def digits_decode_integers(
    z: list[npt.NDArray[np.int64]], paths: DigitPaths
) -> npt.NDArray[np.int64]:
    """:func:`digits_decode` in exact int64 arithmetic (integer node noise; what releases are
    published from: ``M R = A`` holds exactly in integers)."""
    out: npt.NDArray[np.int64] | None = None
    for level, zl in enumerate(z):
        values = np.asarray(zl, dtype=np.int64)
        zero = np.zeros((1, *values.shape[1:]), dtype=np.int64)
        c = np.concatenate([zero, np.cumsum(values, axis=0, dtype=np.int64)])
        part = c[paths.hi[level]] - c[paths.lo[level]]
        sign = paths.sign[level].reshape((-1,) + (1,) * (part.ndim - 1))
        out = sign * part if out is None else out + sign * part
    assert out is not None
    return out


def digits_covariance(
    first: DigitPaths, second: DigitPaths, node_var: list[FloatArray]
) -> FloatArray:
    """``Cov(n_t, n_u)`` for paired releases: ``sum_l sign_t sign_u Var(z over the overlap)``."""
    out = np.zeros(first.lo.shape[1], dtype=np.float64)
    for level, v in enumerate(node_var):
        c = exclusive_cumsum(np.asarray(v, dtype=np.float64))
        lo = np.maximum(first.lo[level], second.lo[level])
        hi = np.maximum(np.minimum(first.hi[level], second.hi[level]), lo)
        out += first.sign[level] * second.sign[level] * (c[hi] - c[lo])
    return out


def digits_count_variances(
    horizon: int, branching: int, levels: int, node_var: list[FloatArray]
) -> FloatArray:
    """``Var(n_t - n_{t-1})``, ``t = 1..N``, for independent block noise of variances
    ``node_var`` (per level)."""
    t = np.arange(0, horizon + 1, dtype=np.int64)
    p = digit_paths(t, branching, levels)
    own = digits_covariance(p, p, node_var)
    now = DigitPaths(lo=p.lo[:, 1:], hi=p.hi[:, 1:], sign=p.sign[:, 1:])
    before = DigitPaths(lo=p.lo[:, :-1], hi=p.hi[:, :-1], sign=p.sign[:, :-1])
    out: FloatArray = own[1:] + own[:-1] - 2.0 * digits_covariance(now, before, node_var)
    return out


def digit_sample_layout(
    branching: int, levels: int, sample: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per level: blocks used by ``t``, by ``t - 1``, and their signed overlap (``(L, n)``
    each, for the releases ``t`` in ``sample``); independent of the budgets."""
    now = digit_paths(sample, branching, levels)
    before = digit_paths(sample - 1, branching, levels)
    lo = np.maximum(now.lo, before.lo)
    overlap = np.maximum(np.minimum(now.hi, before.hi) - lo, 0)
    return (
        (now.hi - now.lo).astype(np.float64),
        (before.hi - before.lo).astype(np.float64),
        (now.sign * before.sign * overlap).astype(np.float64),
    )


def digit_sample_variances(
    layout: tuple[FloatArray, FloatArray, FloatArray], level_var: npt.NDArray[np.float64]
) -> tuple[FloatArray, FloatArray]:
    """Running-total and period-count variances at the releases of
    :func:`digit_sample_layout` when every block of level ``l`` has variance ``level_var[l]``."""
    now_len, before_len, cross = layout
    total: FloatArray = level_var @ now_len
    count: FloatArray = total + level_var @ before_len - 2.0 * (level_var @ cross)
    return total, count
