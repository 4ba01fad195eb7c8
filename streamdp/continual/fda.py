"""Optimal Fenwick-tree node weights: FDA (seed 001) and its any-horizon and minimax extensions.

Problem (DESIGN §3). Nodes ``i = 1..N`` of a Fenwick tree get weights ``lambda_i > 0`` with, for
every period ``p``, ``sum_{i covers p} lambda_i <= 1`` (the sensitivity constraint). Node noise
has variance proportional to ``1/lambda_i^2``; release ``t`` sums the nodes on its read path, so
its variance is proportional to ``f_t(lambda) = sum_{i in path(t)} 1/lambda_i^2``.

- objective "total":   minimise ``sum_t f_t``  (the paper's FDA for ``N = 2^m - 1``);
- objective "minimax": minimise ``max_t f_t``  (uniform worst-case error).

Decomposition used for every ``N`` (no padding). Let ``P = 2^floor(log2 N)``. Node ``P`` covers
periods ``1..P`` and lies on the read path of the ``N - P + 1`` releases ``t >= P``. The nodes
``1..P-1`` form a complete tree whose columns all also meet node ``P``: with ``lambda_P = alpha``
their column budget is ``1 - alpha`` and, both objectives being homogeneous of degree -2, the best
choice is the optimal tree of size ``P - 1`` scaled by ``1 - alpha``. Nodes ``P+1..N`` form an
independent Fenwick tree of size ``N - P`` (shifted by ``P``) with full budget 1. Hence

    total:   V(N) = min_a  V(P-1)/(1-a)^2 + (N-P+1)/a^2 + V(N-P)
                  = (V(P-1)^(1/3) + (N-P+1)^(1/3))^3 + V(N-P),
             a = c/(1+c),  c = ((N-P+1)/V(P-1))^(1/3)
    minimax: M(N) = min_a  max(M(P-1)/(1-a)^2, 1/a^2 + M(N-P))   (root of the equality in a)

with ``V(0) = M(0) = 0``. Both are lower bounds for any feasible weights (the split of the
constraints is exact) and are attained, so they are the optima; ``tests/test_fda.py`` checks
them against a direct SLSQP solve for every ``N <= 64``. For ``N = 2^m - 1`` and the total
objective this is the paper's recursion ``E_m = E_{m-1} + (E_{m-1}^(1/3) + 2^((m-1)/3))^3``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.fenwick import prefix_path_sums
from streamdp.errors import ConfigError

Objective = Literal["total", "minimax"]
OBJECTIVES: tuple[Objective, ...] = ("total", "minimax")


def check_objective(objective: str) -> Objective:
    if objective == "total":
        return "total"
    if objective == "minimax":
        return "minimax"
    raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


def top_node(horizon: int) -> int:
    """``P = 2^floor(log2 N)``, the highest node of a Fenwick tree of size ``N >= 1``."""
    return 1 << (int(horizon).bit_length() - 1)


def _minimax_alpha(left: float, right: float) -> float:
    """Root ``a`` in (0, 1) of ``left/(1-a)^2 = 1/a^2 + right`` (``left > 0``, ``right >= 0``).

    The left side increases and the right side decreases in ``a``, so the root is unique;
    bisection to machine precision (60 halvings of an interval inside (0, 1)).
    """
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if left / (1.0 - mid) ** 2 < 1.0 / (mid * mid) + right:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@lru_cache(maxsize=4096)
def solve(horizon: int, objective: Objective) -> tuple[float, float]:
    """``(optimal objective value, top weight alpha)`` for a tree of size ``horizon``.

    O(log N) distinct sub-problems (complete trees ``2^k - 1`` and the suffixes of ``N``),
    each O(1) (total: closed form) or one bisection (minimax); memoised.
    """
    n = check_horizon(horizon)
    obj = check_objective(objective)
    P = top_node(n)
    left = solve(P - 1, obj)[0] if P > 1 else 0.0
    right = solve(n - P, obj)[0] if n > P else 0.0
    if obj == "total":
        readers = float(n - P + 1)
        if left == 0.0:
            return readers + right, 1.0
        c = (readers / left) ** (1.0 / 3.0)
        alpha = c / (1.0 + c)
        return (left ** (1.0 / 3.0) + readers ** (1.0 / 3.0)) ** 3 + right, alpha
    if left == 0.0:
        return 1.0 + right, 1.0
    alpha = _minimax_alpha(left, right)
    return max(left / (1.0 - alpha) ** 2, 1.0 / alpha**2 + right), alpha


def optimal_weights(horizon: int, objective: Objective = "total") -> npt.NDArray[np.float64]:
    """Optimal node weights ``lambda_1..lambda_N``, shape ``(N,)``; vectorised, O(N).

    ``w(N) = [ (1 - alpha_N) * w(P-1), alpha_N, w(N-P) ]`` (see the module docstring); each
    size is built once. ``N = 10^6`` takes a few milliseconds.
    """
    n = check_horizon(horizon)
    obj = check_objective(objective)
    memo: dict[int, npt.NDArray[np.float64]] = {0: np.zeros(0, dtype=np.float64)}

    def build(size: int) -> npt.NDArray[np.float64]:
        # iterative over the chain of complete trees to avoid deep recursion
        if size in memo:
            return memo[size]
        P = top_node(size)
        left = build(P - 1)
        right = build(size - P)
        alpha = solve(size, obj)[1]
        out = np.concatenate([left * (1.0 - alpha), [alpha], right])
        memo[size] = out
        return out

    return build(n)


def coefficient(k: int, horizon: int, objective: Objective = "total") -> float:
    """Weight ``lambda_k`` of one node in O(log N) (the paper's Algorithm 4, any ``N``).

    Descend from the top node: a step into the left complete tree multiplies by
    ``1 - alpha``; a step into the right tree keeps the factor; landing on the node multiplies
    by its ``alpha``. No matrix and no other weight is built.
    """
    n = check_horizon(horizon)
    obj = check_objective(objective)
    if not 1 <= k <= n:
        raise ConfigError(f"node must be in 1..{n}, got {k}")
    factor = 1.0
    while True:
        P = top_node(n)
        alpha = solve(n, obj)[1]
        if k == P:
            return factor * alpha
        if k < P:
            factor *= 1.0 - alpha
            n = P - 1
        else:
            k -= P
            n -= P


def fda_level_alphas(m: int) -> npt.NDArray[np.float64]:
    """Paper closed form for ``N = 2^m - 1``: ``alpha_j`` for levels ``j = 1..m``, shape ``(m,)``.

    ``E_1 = 1``; ``c_j = (2^(j-1)/E_{j-1})^(1/3)``, ``alpha_j = c_j/(1+c_j)``,
    ``E_j = E_{j-1} + (E_{j-1}^(1/3) + 2^((j-1)/3))^3``; ``alpha_1 = 1``.
    """
    if m < 1:
        raise ConfigError(f"tree depth m must be >= 1, got {m}")
    alphas = np.ones(m, dtype=np.float64)
    E = 1.0
    for j in range(2, m + 1):
        c = (2.0 ** (j - 1) / E) ** (1.0 / 3.0)
        alphas[j - 1] = c / (1.0 + c)
        E = E + (E ** (1.0 / 3.0) + 2.0 ** ((j - 1) / 3.0)) ** 3
    return alphas


def fda_coefficients(nodes: npt.NDArray[np.int64], m: int) -> npt.NDArray[np.float64]:
    """Algorithm 4 for ``N = 2^m - 1``, vectorised over an array of node indices.

    Each entry is computed by its own O(m) descent (no weight of another node is used), so this
    is the coefficient function applied elementwise. ``nodes`` shape ``(n,)``, values in
    ``1..2^m - 1``; returns shape ``(n,)``.
    """
    alphas = fda_level_alphas(m)
    k = np.asarray(nodes, dtype=np.int64).copy()
    if k.size and (k.min() < 1 or k.max() > (1 << m) - 1):
        raise ConfigError(f"nodes must be in 1..{(1 << m) - 1}")
    factor = np.ones(k.shape, dtype=np.float64)
    done = np.zeros(k.shape, dtype=bool)
    for level in range(m, 0, -1):
        P = 1 << (level - 1)
        a = alphas[level - 1]
        hit = ~done & (k == P)
        factor[hit] *= a
        done |= hit
        go_left = ~done & (k < P)
        factor[go_left] *= 1.0 - a
        k[~done & (k > P)] -= P
    assert bool(done.all())
    return factor


def binary_weights(horizon: int) -> npt.NDArray[np.float64]:
    """Unweighted binary mechanism (Chan, Shi, Song 2010): every ``lambda_i = 1/L``.

    ``L = floor(log2 N) + 1``.

    ``L`` is the longest update chain (period 1 is covered by nodes 1, 2, 4, ..., ``P``).
    """
    n = check_horizon(horizon)
    L = n.bit_length()
    return np.full(n, 1.0 / L, dtype=np.float64)


def path_objectives(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``f_t = sum_{i in path(t)} 1/lambda_i^2`` for ``t = 1..N``; shape ``(N,)`` (Fenwick)."""
    return prefix_path_sums(1.0 / np.asarray(weights, dtype=np.float64) ** 2)


def objective_value(weights: npt.NDArray[np.float64], objective: Objective) -> float:
    """``sum_t f_t`` (total) or ``max_t f_t`` (minimax) of a Fenwick weight vector."""
    f = path_objectives(weights)
    return float(f.sum()) if check_objective(objective) == "total" else float(f.max())
