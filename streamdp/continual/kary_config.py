"""What a valid k-ary configuration is, and its exact budget arithmetic.

The names of the k-ary mechanisms and objectives, the range of the branching factor ``k``,
per-level budget fractions whose exact (rational) sum is at most 1, and a node's noise scale
rounded so that it never spends more than its share of epsilon. Shared by the digit maths
(:mod:`~streamdp.continual.kary_digits`), the GLS maths (:mod:`~streamdp.continual.kary_gls`),
the strategies (:mod:`~streamdp.continual.kary`) and the optimiser
(:mod:`~streamdp.continual.kary_optimise`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

KaryMechanism = Literal["kary_digits", "kary_gls"]
KARY_MECHANISMS: tuple[KaryMechanism, ...] = ("kary_digits", "kary_gls")
KaryObjective = Literal["total", "minimax", "count"]
KARY_OBJECTIVES: tuple[KaryObjective, ...] = ("total", "minimax", "count")
MAX_BRANCHING = 64


def check_kary_objective(objective: str) -> KaryObjective:
    """``objective`` typed, or :class:`ConfigError` naming the allowed values."""
    for known in KARY_OBJECTIVES:
        if objective == known:
            return known
    raise ConfigError(
        f"objective must be one of {', '.join(KARY_OBJECTIVES)} for the k-ary mechanisms "
        f"(total: mean running-total error; minimax: worst running total; count: period "
        f"counts), got {objective!r}"
    )


def check_kary_mechanism(mechanism: str) -> KaryMechanism:
    """``mechanism`` typed, or :class:`ConfigError`."""
    for known in KARY_MECHANISMS:
        if mechanism == known:
            return known
    raise ConfigError(f"k-ary mechanism must be one of {KARY_MECHANISMS}, got {mechanism!r}")


def check_branching(branching: int) -> int:
    """``k`` must be an integer in ``2..MAX_BRANCHING``."""
    if (
        isinstance(branching, bool)
        or not isinstance(branching, int | np.integer)
        or not 2 <= branching <= MAX_BRANCHING
    ):
        raise ConfigError(
            f"branching (k) must be an integer in 2..{MAX_BRANCHING}, got {branching!r}"
        )
    return int(branching)


def exact_budgets(fractions: npt.ArrayLike) -> tuple[float, ...]:
    """Per-level budget fractions as floats whose EXACT (rational) sum is at most 1.

    Normalises ``fractions`` (all > 0) and, if float rounding left the exact sum above 1,
    scales down by one part in 2^50 until it is not.
    """
    raw = np.asarray(fractions, dtype=np.float64)
    if raw.ndim != 1 or raw.size == 0 or not np.all(np.isfinite(raw)) or np.any(raw <= 0):
        raise ConfigError(f"level budgets must be a non-empty list of numbers > 0, got {raw}")
    values = raw / raw.sum()
    while sum(Fraction(float(v)) for v in values) > 1:
        values = values * (1.0 - 2.0**-50)
    return tuple(float(v) for v in values)


def exact_scale(sensitivity: float, epsilon: float | Fraction, weight: float) -> float:
    """``Delta / (epsilon * weight)`` rounded UP so that ``Delta / b <= epsilon * weight``
    holds exactly (as rationals, ``epsilon`` exact): a node never spends more than its share."""
    eps = Fraction(epsilon)
    b = sensitivity / (float(eps) * weight)
    while Fraction(sensitivity) / Fraction(b) > eps * Fraction(weight):
        b = math.nextafter(b, math.inf)
    return b
