"""Generalised least-squares (GLS) maths of a k-ary block tree: the estimate of every period
from ALL noisy blocks, and its exact variances.

``s^ = A (R'WR)^-1 R'W y = s + n``, ``n = A (R'WR)^-1 R'W z``, computed on the tree by two
passes (bottom-up inverse-variance combination, top-down distribution of each parent's
residual to its children in proportion to their variances: Hay et al.'s boosting with
weights), O(nodes). Exact variances of every running total and period count come from the
same tree recursion (:func:`gls_variances`); when every block of a level has one variance,
:func:`gls_uniform_variances` gives them in O(L) per period (what the optimiser scores).

Blocks are numbered as in :mod:`streamdp.continual.kary`, clipped to the horizon.
Units: variances in counts^2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.continual.kary_config import FloatArray, IntArray, check_branching


def gls_levels(horizon: int, branching: int) -> int:
    """``L = floor(log_k N) + 1``: block sizes ``1, k, .., k^(L-1) <= N``."""
    k = check_branching(branching)
    levels, size = 1, k
    while size <= horizon:
        levels += 1
        size *= k
    return levels


@dataclass(frozen=True)
class GlsLevel:
    """One level of the GLS tree: its block count and nominal block size."""

    blocks: int
    size: int  # nominal block size k^l


def gls_tree_levels(horizon: int, branching: int, levels: int) -> list[GlsLevel]:
    """The ``levels`` levels of the tree over ``horizon`` periods, bottom (``k^0``) up."""
    return [
        GlsLevel(blocks=-(-horizon // branching**level), size=branching**level)
        for level in range(levels)
    ]


def _group_sums(values: npt.NDArray[np.float64], branching: int) -> FloatArray:
    """Sum consecutive groups of ``branching`` rows (the last group may be short)."""
    starts = np.arange(0, values.shape[0], branching)
    out: FloatArray = np.add.reduceat(values, starts, axis=0)
    return out


def gls_bottom_up(
    node_var: list[FloatArray], branching: int
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Variances ``V`` of each node's subtree-only estimate and the children's variance sums.

    ``node_var[l]`` shape ``(B_l,)``. Returns ``(V, S)`` per level: ``V[l]`` shape ``(B_l,)``;
    ``S[l]`` shape ``(B_l,)`` for ``l >= 1`` is the sum of the children's ``V`` (``S[0]`` is
    empty). A virtual root (no measurement) joins the top level when it has several blocks.
    """
    V = [np.asarray(node_var[0], dtype=np.float64)]
    S = [np.zeros(0, dtype=np.float64)]
    for level in range(1, len(node_var)):
        child_sum = _group_sums(V[-1], branching)
        v = np.asarray(node_var[level], dtype=np.float64)
        S.append(child_sum)
        V.append(1.0 / (1.0 / v + 1.0 / child_sum))
    return V, S


def gls_estimate(y: list[FloatArray], node_var: list[FloatArray], branching: int) -> FloatArray:
    """GLS estimate of every period from noisy block sums ``y[l]`` (shape ``(B_l, ...)``).

    Two passes, O(nodes): bottom-up ``u_v = V_v (y_v / v_v + sum_c u_c / S_v)``; top-down
    ``x^_c = u_c + (V_c / S_v)(x^_v - sum_c u_c)``. Returns shape ``(N, ...)``. Exactly
    ``(R'WR)^-1 R'W y`` (checked against the dense solve in the tests).
    """
    V, S = gls_bottom_up(node_var, branching)
    u = [np.asarray(y[0], dtype=np.float64)]
    child_u: list[FloatArray] = [np.zeros(0)]
    for level in range(1, len(y)):
        cu = _group_sums(u[-1], branching)
        child_u.append(cu)
        v = np.asarray(node_var[level], dtype=np.float64)
        shape = (-1,) + (1,) * (cu.ndim - 1)
        u.append(
            V[level].reshape(shape)
            * (np.asarray(y[level]) / v.reshape(shape) + cu / S[level].reshape(shape))
        )
    top = len(y) - 1
    est = u[top]  # under a virtual root the top blocks keep their own estimates
    for level in range(top, 0, -1):
        gain = np.repeat(1.0 / S[level], branching)[: V[level - 1].shape[0]] * V[level - 1]
        resid = np.repeat(est - child_u[level], branching, axis=0)[: V[level - 1].shape[0]]
        shape = (-1,) + (1,) * (resid.ndim - 1)
        est = u[level - 1] + gain.reshape(shape) * resid
    return est


def _parent_prefix(values: FloatArray, branching: int) -> FloatArray:
    """Exclusive cumulative sum of ``values`` within each group of ``branching`` siblings."""
    c = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(values.shape[0])
    out: FloatArray = c[idx] - c[(idx // branching) * branching]
    return out


def _with_root(
    V: list[FloatArray], S: list[FloatArray]
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Add a virtual root (no measurement: ``V_root = S_root = sum of the top level's V``)
    when the top level has several blocks, so every recursion ends at a single node."""
    if V[-1].shape[0] == 1:
        return V, S
    root = np.array([float(V[-1].sum())])
    return [*V, root], [*S, root]


def gls_variances(
    node_var: list[FloatArray], branching: int, periods: IntArray | None = None
) -> tuple[FloatArray, FloatArray]:
    """Exact ``Var(s^_t)`` (running totals) and ``Var(x^_t)`` (period counts).

    ``periods``: 0-based periods ``t - 1`` to evaluate (default all ``N``); returns two arrays
    of that shape. Posterior recursion (valid for any noise with these variances: the
    estimator is linear, so only second moments matter). Given a parent's error ``e_v``,
    child ``c``'s error is ``g_c e_v + xi_c`` with ``g_c = V_c / S_v`` and
    ``Cov(xi) = diag(V) - V V' / S_v``, independent of ``e_v``. The error of the prefix of the
    first ``r`` periods of node ``v`` is ``h_v(r) e_v + eta_v(r)``; with ``r`` inside child
    ``j``: ``h_v = sum_{i<j} g_i + g_j h_j`` and
    ``Var(eta_v) = Var(eta_j) + Vp + h_j^2 V_j - (Vp + h_j V_j)^2 / S_v``
    (``Vp = sum_{i<j} V_i``). At the root ``Var = h^2 V_root + Var(eta)``. Period counts:
    ``Var(e_c) = g_c^2 Var(e_v) + V_c - V_c^2 / S_v`` from the top down.
    Cost O(nodes) for the bottom-up pass plus O(L) per evaluated period.
    """
    V, S = _with_root(*gls_bottom_up(node_var, branching))
    n = V[0].shape[0]
    where = np.arange(n) if periods is None else np.asarray(periods, dtype=np.int64)
    h = np.ones(where.shape[0], dtype=np.float64)
    Q = np.zeros(where.shape[0], dtype=np.float64)
    steps = []
    for level in range(1, len(V)):
        child_V = V[level - 1]
        gain = child_V / np.repeat(S[level], branching)[: child_V.shape[0]]
        block = where // branching ** (level - 1)  # the child block holding each period
        s_v = S[level][block // branching]
        vj = child_V[block]
        g = gain[block]
        vp = _parent_prefix(child_V, branching)[block]
        gp = _parent_prefix(gain, branching)[block]
        Q = Q + vp + h * h * vj - (vp + h * vj) ** 2 / s_v
        h = gp + g * h
        steps.append((g, vj))
    top_var = float(V[-1][0])
    total: FloatArray = h * h * top_var + Q
    err = np.full(where.shape[0], top_var)
    for g, vj in reversed(steps):
        err = g * g * err + vj - g * vj
    return total, err


def gls_solve(b: FloatArray, node_var: list[FloatArray], branching: int) -> FloatArray:
    """``(R'WR)^-1 b`` for a period vector ``b`` (shape ``(N,)``) by the two-pass estimator.

    The estimator maps ``y`` to ``(R'WR)^-1 R'W y``; leaf measurements ``y_0 = b v_0`` and
    zeros elsewhere give ``R'W y = b``.
    """
    y = [np.asarray(b, dtype=np.float64) * node_var[0]]
    y += [np.zeros(v.shape[0]) for v in node_var[1:]]
    return gls_estimate(y, node_var, branching)


@dataclass(frozen=True)
class GlsUniformLayout:
    """Where each requested period sits in a k-ary tree, per step up (budget-independent)."""

    blocks: tuple[int, ...]  # per level, with a virtual root level when needed
    virtual_root: bool
    earlier_siblings: tuple[FloatArray, ...]  # per step up: child block index mod k
    last_child: tuple[npt.NDArray[np.bool_], ...]  # the child block is its level's last
    last_parent: tuple[npt.NDArray[np.bool_], ...]  # the parent block is its level's last


def gls_uniform_layout(
    horizon: int, branching: int, levels: int, periods: IntArray
) -> GlsUniformLayout:
    """Where each 0-based period of ``periods`` sits in the tree (for :func:`gls_uniform_eval`)."""
    k = branching
    blocks = [level.blocks for level in gls_tree_levels(horizon, k, levels)]
    virtual = blocks[-1] > 1
    if virtual:
        blocks.append(1)
    where = np.asarray(periods, dtype=np.int64)
    siblings, last_child, last_parent = [], [], []
    for level in range(1, len(blocks)):
        block = where // k ** (level - 1)
        siblings.append((block % k).astype(np.float64))
        last_child.append(block == blocks[level - 1] - 1)
        last_parent.append(block // k == blocks[level] - 1)
    return GlsUniformLayout(
        tuple(blocks), virtual, tuple(siblings), tuple(last_child), tuple(last_parent)
    )


def gls_uniform_eval(
    level_var: npt.NDArray[np.float64], layout: GlsUniformLayout, branching: int
) -> tuple[FloatArray, FloatArray]:
    """:func:`gls_variances` at the periods of ``layout`` when every block of level ``l``
    has variance ``level_var[l]`` (full blocks of a level are alike; the last may be short)."""
    k = branching
    inverse = [1.0 / float(v) for v in level_var] + ([0.0] if layout.virtual_root else [])
    blocks = layout.blocks
    full = [float(level_var[0])]
    last = [float(level_var[0])]
    s_full = [0.0]
    s_last = [0.0]
    for level in range(1, len(inverse)):
        children_of_last = blocks[level - 1] - (blocks[level] - 1) * k
        s_full.append(k * full[-1])
        s_last.append((children_of_last - 1) * full[-1] + last[-1])
        full.append(1.0 / (inverse[level] + 1.0 / s_full[-1]))
        last.append(1.0 / (inverse[level] + 1.0 / s_last[-1]))
    n = layout.earlier_siblings[0].shape[0] if layout.earlier_siblings else None
    h: FloatArray | float = 1.0
    Q: FloatArray | float = 0.0
    steps = []
    for step in range(len(inverse) - 1):
        level = step + 1
        s_v = np.where(layout.last_parent[step], s_last[level], s_full[level])
        vj = np.where(layout.last_child[step], last[level - 1], full[level - 1])
        vp = layout.earlier_siblings[step] * full[level - 1]  # the last block is never earlier
        g = vj / s_v
        Q = Q + vp + h * h * vj - (vp + h * vj) ** 2 / s_v
        h = vp / s_v + g * h
        steps.append((g, vj))
    top = last[-1]
    total = np.asarray(h * h * top + Q, dtype=np.float64)
    err: FloatArray | float = top
    for g, vj in reversed(steps):
        err = g * g * err + vj - g * vj
    errors = np.asarray(err, dtype=np.float64)
    if n is not None:
        total = np.broadcast_to(total, (n,)).copy()
        errors = np.broadcast_to(errors, (n,)).copy()
    return total, errors


def gls_uniform_variances(
    level_var: npt.NDArray[np.float64], horizon: int, branching: int, periods: IntArray
) -> tuple[FloatArray, FloatArray]:
    """:func:`gls_variances` when every block of a level has one variance ``level_var[l]``.

    Only two kinds of block exist per level (full ones, all alike, and the last one), so the
    bottom-up pass is O(L) and each requested period (0-based) costs O(L): no O(N) work, which
    is what makes optimising k and the budgets affordable at N = 10^6.
    """
    where = np.asarray(periods, dtype=np.int64)
    layout = gls_uniform_layout(horizon, branching, len(level_var), where)
    total, err = gls_uniform_eval(level_var, layout, branching)
    if not layout.earlier_siblings:  # one block, no step up: N = 1
        total = np.full(where.shape[0], float(total[0]) if total.ndim else float(total))
        err = np.full(where.shape[0], float(err[0]) if err.ndim else float(err))
    return total, err
