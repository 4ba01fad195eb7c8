"""Exact decisions about products of floats, without rounding (Dekker 1971; no FMA needed).

Used to prove that a rounded noise scale or loss is on the safe side of its exact bound.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy.typing as npt


def float_at_most(value: Fraction | Decimal) -> float:
    """The largest float not above the exact number ``value``."""
    out = float(value)
    while out > value:
        out = math.nextafter(out, -math.inf)
    return out


def float_at_least(value: Fraction | Decimal) -> float:
    """The smallest float not below the exact number ``value`` (OverflowError beyond the
    largest float)."""
    out = float(value)
    while out < value:
        out = math.nextafter(out, math.inf)
    return out


def float_sqrt_at_least(value: Fraction) -> float:
    """The smallest float whose square is not below the exact ``value >= 0`` (``inf`` beyond
    the floats), found in a few steps at any magnitude: the integer square root of ``value``
    scaled to about 110 bits gives a start within an ulp. (Starting from ``sqrt(float(value))``
    walked up one subnormal at a time when ``value`` underflowed: a spec with a huge rho hung.)"""
    if value < 0:
        raise ValueError(f"no square root of the negative {value}")
    if value == 0:
        return 0.0
    shift = max(0, (110 - value.numerator.bit_length() + value.denominator.bit_length()) // 2 + 1)
    scaled = (value.numerator << (2 * shift)) // value.denominator
    root = Fraction(math.isqrt(scaled) + 1, 1 << shift)  # above sqrt(value)
    try:
        out = float_at_least(root)
    except OverflowError:
        return math.inf
    while out > 0 and Fraction(math.nextafter(out, 0.0)) ** 2 >= value:
        out = math.nextafter(out, 0.0)  # at most a step or two: root is within 2^-54 of it
    return out


def _split(a: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Dekker's split: ``a = hi + lo`` exactly, each half with at most 26 significant bits."""
    c = 134217729.0 * a  # 2^27 + 1
    hi = c - (c - a)
    return hi, a - hi


def two_product(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(p, e)`` with ``p = fl(a*b)`` and ``a*b = p + e`` exactly (Dekker 1971; no FMA needed).

    Exact while no product over- or underflows, which the scale limits guarantee.
    """
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def at_most_product(
    x: npt.NDArray[np.float64], a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """Exactly ``x <= a*b`` elementwise (floats, no rounding anywhere in the decision).

    With ``a*b = p + e`` exactly and ``|e|`` at most half the float spacing at ``p`` on the side
    of the exact product: ``x < p`` implies ``x <= p - spacing <= a*b``; ``x == p`` needs
    ``e >= 0``; ``x > p`` implies ``x >= p + spacing > a*b``.
    """
    p, e = two_product(a, b)
    result: npt.NDArray[np.bool_] = (x < p) | ((x == p) & (e >= 0.0))
    return result
