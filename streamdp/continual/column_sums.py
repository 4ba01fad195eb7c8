"""Column sums of a one-node-per-period strategy's weights: for each period, the total weight
of the nodes covering it, and an exact upper bound on the largest (what epsilon is divided by).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from streamdp.continual.strategy import Strategy

#: Relative slack that bounds the float column sums of the weights from above (recursive
#: summation of at most 64 positive terms is off by less than ``64 * 2^-53 = 2^-47`` of the sum).
_COLUMN_SLACK = 1.0 + 2.0**-44

ScalarT = TypeVar("ScalarT", np.int64, np.float64)


def weight_column_bound(strategy: Strategy) -> Fraction:
    """The exact largest column sum ``max_p sum_{i covers p} lambda_i``, or 1 if larger.

    Every float weight is an integer multiple of ``2^-K`` (``K`` from the smallest weight's
    exponent), so the column sums are integer sums: each weight is split into two int64 limbs
    of 30 and at most 53 bits and the limbs are summed per column without rounding. When the
    weights span more than 2^30 (the limbs would not fit), a float sum with a proven relative
    slack is used instead.
    """
    weights = np.asarray(strategy.weights, dtype=np.float64)
    if not strategy.is_tree:  # one node per column: its weight is the exact column sum
        return max(Fraction(1), Fraction(float(np.max(weights))))
    _, exponents = np.frexp(weights)
    low, high = int(exponents.min()), int(exponents.max())
    if high - low > 30:
        top = float(np.max(fenwick_column_sums(weights)))
        return Fraction(max(1.0, top) * _COLUMN_SLACK)
    K = 53 - low
    scaled = np.ldexp(weights, K)  # integers below 2^(K + high) <= 2^83
    limb = 2.0**30
    hi = np.floor(scaled / limb)
    lo = scaled - hi * limb  # exact: an integer below 2^30
    hi_sums = _fenwick_column_sums(hi.astype(np.int64))
    lo_sums = _fenwick_column_sums(lo.astype(np.int64))
    hi_sums += lo_sums >> 30
    lo_sums &= (1 << 30) - 1
    top_hi = int(hi_sums.max())
    top_lo = int(lo_sums[hi_sums == top_hi].max())
    return max(Fraction(1), Fraction((top_hi << 30) + top_lo, 1 << K))


def fenwick_column_sums(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``sum_{i covers p} w_i`` for ``p = 1..N`` on the Fenwick tree; shape ``(N,)``."""
    return _fenwick_column_sums(np.asarray(weights, dtype=np.float64))


def _fenwick_column_sums(values: npt.NDArray[ScalarT]) -> npt.NDArray[ScalarT]:
    """Column sums of ``values`` (floats or int64, summed in their own dtype) along the update
    chains, level by level; shape ``(N,)``."""
    n = values.shape[0]
    out: npt.NDArray[ScalarT] = np.zeros(n, dtype=values.dtype)
    node = np.arange(1, n + 1, dtype=np.int64)
    period = node.copy()
    alive = node <= n
    while np.any(alive):
        period, node = period[alive], node[alive]
        out[period - 1] += values[node - 1]
        node = node + (node & -node)
        alive = node <= n
    return out
