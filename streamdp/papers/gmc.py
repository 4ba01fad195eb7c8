"""Consistency on a tree by the generation-matrix method (GMC), O(nodes).

Seed 000, eq. 14-17 (Cai et al. 2022): :func:`gmc_projection` releases
``y = x - Sigma C^T (C Sigma C^T)^{-1} C x`` with ``C Sigma C^T = G^T G`` factorised along the
tree (no fill-in; :func:`generation_matrix`), solved by one upward and one downward propagation.
Trees and value shapes as in
:mod:`streamdp.papers.tree`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from streamdp.papers.tree import FloatArray, Tree, child_sums, tree_values, tree_variances


def generation_matrix(tree: Tree, variances: npt.ArrayLike | None = None) -> sp.csr_matrix:
    """The generation matrix ``G`` (internal x internal) with ``G^T G = C Sigma C^T``.

    Seed 000 eq. 16-17 for ``Sigma = I``: pivots ``theta`` accumulated bottom-up, diagonal
    ``sqrt(theta_i)``, entry ``(i, parent) = -sigma_i^2 / sqrt(theta_i)`` (the paper writes
    ``theta + 1`` for our ``theta`` and ``1`` for ``sigma_i^2``). Rows/columns follow
    ``tree.internal``.
    """
    theta = _gmc_pivots(tree, tree_variances(variances, tree))
    s2 = tree_variances(variances, tree)
    internal = tree.internal
    row_of = -np.ones(tree.size, dtype=np.int64)
    row_of[internal] = np.arange(internal.size)
    root_free = internal[internal > 0]
    rows = np.concatenate([np.arange(internal.size), row_of[root_free]])
    cols = np.concatenate([np.arange(internal.size), row_of[tree.parent[root_free]]])
    vals = np.concatenate([np.sqrt(theta[internal]), -s2[root_free] / np.sqrt(theta[root_free])])
    return sp.csr_matrix((vals, (rows, cols)), shape=(internal.size, internal.size))


def _gmc_pivots(tree: Tree, s2: FloatArray) -> FloatArray:
    """Pivots of the tree-ordered Cholesky of ``C Sigma C^T`` (leaves-first elimination)."""
    has = tree.child_count > 0
    theta = np.where(has, s2, np.inf)
    for start, stop in reversed(tree.level_bounds[:-1]):
        kid_var = child_sums(s2, tree, start, stop)
        internal_kids = np.where(
            np.isfinite(theta), s2 * s2 / np.where(np.isfinite(theta), theta, 1.0), 0.0
        )
        fill = child_sums(internal_kids, tree, start, stop)
        theta[start:stop] = np.where(has[start:stop], s2[start:stop] + kid_var - fill, np.inf)
    return theta


def gmc_projection(
    values: npt.ArrayLike, tree: Tree, variances: npt.ArrayLike | None = None
) -> FloatArray:
    """Generation-matrix consistent release (seed 000 eq. 14, GMC), weighted, O(nodes).

    ``y = x - Sigma C^T mu`` with ``(C Sigma C^T) mu = C x``, solved through the generation
    matrix by upward then downward propagation (seed 000 properties 2 and 3).

    Args:
        values: noisy node values, shape (..., nodes).
        tree: the tree.
        variances: per-node noise variances, shape (nodes,); equal when omitted.

    Returns:
        Consistent node values, shape (..., nodes).
    """
    x = tree_values(values, tree)
    s2 = tree_variances(variances, tree)
    theta = _gmc_pivots(tree, s2)
    has = tree.child_count > 0
    bounds = tree.level_bounds
    # d = C x on internal nodes (zero elsewhere)
    d = np.zeros_like(x)
    for start, stop in bounds[:-1]:
        d[..., start:stop] = np.where(
            has[start:stop], x[..., start:stop] - child_sums(x, tree, start, stop), 0.0
        )
    # upward (forward) elimination: d'_q = d_q + sum_{internal kids c} sigma_c^2/theta_c d'_c
    gain = np.where(has, s2 / np.where(has, theta, 1.0), 0.0)
    for start, stop in reversed(bounds[:-1]):
        d[..., start:stop] += child_sums(d * gain, tree, start, stop)
    # downward back-substitution: mu_c = (d'_c + sigma_c^2 mu_parent) / theta_c
    mu = np.zeros_like(x)
    inv_theta = np.where(has, 1.0 / np.where(has, theta, 1.0), 0.0)
    mu[..., 0] = d[..., 0] * inv_theta[0]
    for start, stop in bounds[1:]:
        p = tree.parent[start:stop]
        mu[..., start:stop] = (d[..., start:stop] + s2[start:stop] * mu[..., p]) * inv_theta[
            start:stop
        ]
    # correction Sigma C^T mu: node v gets sigma_v^2 (mu_v - mu_parent(v))
    corr = mu.copy()
    corr[..., 1:] -= mu[..., tree.parent[1:]]
    out: FloatArray = x - s2 * corr
    return out
