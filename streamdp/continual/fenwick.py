"""Fenwick-tree (binary indexed tree) primitives for continual counting (DESIGN §3, seed 001).

Periods and nodes are 1-based. Node ``i`` holds the partial sum of periods
``i - lowbit(i) + 1 .. i``. A horizon ``N`` need not be a power of two: the tree simply has
nodes ``1..N``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError


def lowbit(i: int) -> int:
    """The lowest set bit of ``i`` (``i & -i``); ``i >= 1``."""
    return i & -i


def _check(i: int, horizon: int, what: str) -> None:
    if not 1 <= i <= horizon:
        raise ConfigError(f"{what} must be in 1..{horizon}, got {i}")


def update_chain(p: int, horizon: int) -> list[int]:
    """Nodes whose partial sum includes period ``p``: ``p, p + lowbit(p), ... <= horizon``."""
    _check(p, horizon, "period")
    chain = []
    while p <= horizon:
        chain.append(p)
        p += lowbit(p)
    return chain


def read_path(t: int) -> list[int]:
    """Nodes summed for the prefix ``s_t``: ``t, t - lowbit(t), ... > 0`` (popcount(t) nodes).

    Their intervals partition ``1..t``.
    """
    if t < 0:
        raise ConfigError(f"prefix length must be >= 0, got {t}")
    path = []
    while t > 0:
        path.append(t)
        t -= lowbit(t)
    return path


def children(t: int) -> list[int]:
    """Nodes ``j`` with ``j + lowbit(j) = t``: ``t-1, t-2, t-4, ..., t - lowbit(t)/2``.

    Finalisation rule: when period ``t`` closes, ``c_t = a_t + sum_{j in children(t)} c_j``.
    """
    out = []
    step = 1
    low = lowbit(t)
    while step < low:
        out.append(t - step)
        step <<= 1
    return out


def parent(j: int) -> int:
    """The node ``j + lowbit(j)`` whose sum absorbs node ``j`` (may exceed the horizon)."""
    return j + lowbit(j)


def interval(i: int) -> tuple[int, int]:
    """Periods ``(first, last)`` covered by node ``i``."""
    return i - lowbit(i) + 1, i


def lowbits(horizon: int) -> npt.NDArray[np.int64]:
    """``lowbit(i)`` for ``i = 1..horizon``; shape ``(horizon,)``."""
    i = np.arange(1, horizon + 1, dtype=np.int64)
    return i & -i


def prefix_path_sums(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``out[t-1] = sum_{i in read_path(t)} values[i-1]`` for ``t = 1..N``; O(N) vectorised work.

    ``values`` shape ``(N, ...)`` (per node, any trailing shape, e.g. counters). Computed level
    by level of popcount: ``out[t] = values[t] + out[t - lowbit(t)]`` and ``t - lowbit(t)`` has
    one bit fewer than ``t``.
    """
    y = np.asarray(values, dtype=np.float64)
    n = y.shape[0]
    out = np.zeros((n + 1, *y.shape[1:]), dtype=np.float64)  # out[0] = empty prefix
    t = np.arange(1, n + 1, dtype=np.int64)
    pop = np.zeros(n, dtype=np.int64)
    x = t.copy()
    while np.any(x):
        pop += x & 1
        x >>= 1
    for level in range(1, int(pop.max(initial=0)) + 1):
        sel = t[pop == level]
        out[sel] = y[sel - 1] + out[sel & (sel - 1)]
    result: npt.NDArray[np.float64] = out[1:]
    return result


def covering_matrix(horizon: int) -> npt.NDArray[np.float64]:
    """Dense 0/1 matrix ``A[p-1, i-1] = 1`` if node ``i`` covers period ``p``; tests only."""
    A = np.zeros((horizon, horizon), dtype=np.float64)
    for i in range(1, horizon + 1):
        first, last = interval(i)
        A[first - 1 : last, i - 1] = 1.0
    return A


def read_matrix(horizon: int) -> npt.NDArray[np.float64]:
    """Dense 0/1 matrix ``R[t-1, i-1] = 1`` if node ``i`` is on ``read_path(t)``; tests only."""
    R = np.zeros((horizon, horizon), dtype=np.float64)
    for t in range(1, horizon + 1):
        for i in read_path(t):
            R[t - 1, i - 1] = 1.0
    return R
