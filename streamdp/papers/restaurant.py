"""Restaurant sales: per-item count trees plus combo constraints (seed 004), solved exactly.

Values ``X`` have shape (items, nodes): row i is item i's noisy range tree over T days
(breadth-first, leaves = days). Constraints: every item's tree is consistent, and every day's
item vector lies in span(combos). The consistent set is ``range(A) (x) span(combos)`` (A = the
tree's leaves-to-nodes aggregation): a Kronecker product of two subspaces. When the noise
weights factor too (``W = D_nodes (x) D_items``: every item shares the tree's node variances,
the usual case because every counter of a stream uses the same strategy), the joint weighted
projection is the Kronecker product of the two projections. They commute, so

    exact release = (project each item's tree) then (project every node's item vector onto
    span(combos))

in one pass, no iteration. Internal nodes are sums of days, so the combo constraint on days is
the same as on every node. Seed 004's Algorithm 1 (``method="approx"``) alternates Boosting per
item with the combo projection of the days only, and converges to the same point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from streamdp.consistency.combos import ComboSpan
from streamdp.errors import ConfigError
from streamdp.papers.approximation import ApproximationResult, alternating_projections
from streamdp.papers.boosting import boosting
from streamdp.papers.reference import dense_projection
from streamdp.papers.sparse import sparse_projection
from streamdp.papers.tree import Tree, complete_height, complete_tree
from streamdp.papers.tree_passes import tree_projection

FloatArray = npt.NDArray[np.float64]
RestaurantMethod = Literal["exact", "approx", "dense", "sparse"]


def _setup(
    noisy: npt.ArrayLike,
    combos: npt.ArrayLike,
    branching: int,
    tree: Tree | None,
    node_variances: npt.ArrayLike | None,
) -> tuple[FloatArray, ComboSpan, Tree, Callable[[FloatArray], FloatArray], FloatArray | None]:
    X = np.asarray(noisy, dtype=np.float64)
    if X.ndim != 2:
        raise ConfigError(f"noisy must have shape (items, nodes), got {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ConfigError("noisy contains non-finite values; pass finite noisy counts")
    span = ComboSpan.from_combos(combos)
    if span.items != X.shape[0]:
        raise ConfigError(
            f"combos describe {span.items} items but noisy has {X.shape[0]} rows (one per item)"
        )
    s2 = None if node_variances is None else np.asarray(node_variances, dtype=np.float64)
    if tree is None:
        height = complete_height(X.shape[1], branching)
        if s2 is None:
            return X, span, complete_tree(branching, height), lambda v: boosting(v, branching), None
        tree = complete_tree(branching, height)
    if tree.size != X.shape[1]:
        raise ConfigError(f"noisy has {X.shape[1]} nodes per item but the tree has {tree.size}")
    fixed_tree = tree
    return X, span, fixed_tree, lambda v: tree_projection(v, fixed_tree, s2), s2


def restaurant_constraint_matrix(tree: Tree, span: ComboSpan) -> sp.csr_matrix:
    """Sparse ``C`` over the item-major flattening of (items, nodes): trees, then combos on days."""
    items = span.items
    tree_rows = sp.kron(sp.identity(items, format="csr"), tree.constraint_matrix(), format="csr")
    leaves = tree.leaves
    q = span.null.shape[1]
    if q == 0:
        return tree_rows
    # row (leaf l, null vector j): sum_i null[i, j] * y[i, leaf_l]
    rows = np.repeat(np.arange(leaves.size * q), items)
    item_idx = np.tile(np.arange(items), leaves.size * q)
    leaf_idx = np.repeat(leaves, q * items)
    null_idx = np.tile(np.repeat(np.arange(q), items), leaves.size)
    cols = item_idx * tree.size + leaf_idx
    vals = span.null[item_idx, null_idx]
    combo_rows = sp.csr_matrix((vals, (rows, cols)), shape=(leaves.size * q, items * tree.size))
    return sp.vstack([tree_rows, combo_rows], format="csr")


def _weights(
    tree: Tree, items: int, s2: FloatArray | None, item_var: FloatArray | None
) -> FloatArray:
    node_w = np.ones(tree.size) if s2 is None else 1.0 / s2
    item_w = np.ones(items) if item_var is None else 1.0 / item_var
    out: FloatArray = np.kron(item_w, node_w).astype(np.float64)
    return out


def restaurant_approximation(
    noisy: npt.ArrayLike,
    combos: npt.ArrayLike,
    branching: int = 2,
    *,
    tree: Tree | None = None,
    node_variances: npt.ArrayLike | None = None,
    item_variances: npt.ArrayLike | None = None,
    tol: float = 1e-6,
    max_iter: int = 10_000,
) -> ApproximationResult:
    """Seed 004 Algorithm 1: Boosting per item, then combo projection per day, repeated.

    Both groups are vectorised (all items' trees at once; all days at once). The consistency
    deviation per sweep is eq. 14: the summed squared residuals of the tree constraints
    (``node - sum of children``) and the combo constraints (``null^T v``, orthonormal rows)
    divided by items x days.
    """
    X, span, the_tree, project_tree, _ = _setup(noisy, combos, branching, tree, node_variances)
    iv = None if item_variances is None else np.asarray(item_variances, dtype=np.float64)
    P = span.weighted_projector(iv)
    leaves = the_tree.leaves
    C_tree = the_tree.constraint_matrix()

    def project_days(v: FloatArray) -> FloatArray:
        out = v.copy()
        out[:, leaves] = P.T @ v[:, leaves]
        return out

    def residual(v: FloatArray) -> FloatArray:
        tree_r = (C_tree @ v.T).ravel()
        combo_r = span.residual(v[:, leaves].T).ravel()
        return np.concatenate([tree_r, combo_r])

    return alternating_projections(
        X,
        [project_tree, project_days],
        residual,
        tol=tol,
        max_iter=max_iter,
        deviation_scale=float(X.shape[0] * leaves.size),
    )


def restaurant_release(
    noisy: npt.ArrayLike,
    combos: npt.ArrayLike,
    branching: int = 2,
    method: RestaurantMethod = "exact",
    *,
    tree: Tree | None = None,
    node_variances: npt.ArrayLike | None = None,
    item_variances: npt.ArrayLike | None = None,
    tol: float = 1e-6,
) -> FloatArray:
    """Optimal consistent release of per-item count trees under combo constraints.

    Args:
        noisy: shape (items, nodes); row i holds item i's noisy counts of a complete
            ``branching``-ary tree over T days in breadth-first order (root first, leaves = the
            days in order), ``nodes = (b^(h+1) - 1)/(b - 1)``, ``T = b^h``.
        combos: shape (combos, items): units of each item in each combo (seed 004: 3 x 5).
        branching: the tree's fan-out (ignored when ``tree`` is given).
        method: ``"exact"`` (Kronecker factorisation, one pass, O(items x nodes)), ``"approx"``
            (seed 004 Algorithm 1 to ``tol``), ``"dense"`` (Moore-Penrose reference, small T
            only), ``"sparse"`` (general sparse solver).
        tree: any breadth-first :class:`Tree` whose leaves are the days (e.g.
            ``dyadic_tree(T)`` for T not a power of the branching).
        node_variances: noise variance of each node, shape (nodes,), shared by all items.
        item_variances: optional extra per-item variance factor, shape (items,).
        tol: stopping threshold of ``"approx"``.

    Returns:
        Consistent values, shape (items, nodes): each item's tree adds up and every node's (so
        every day's) item vector lies in span(combos).
    """
    X, span, the_tree, project_tree, s2 = _setup(noisy, combos, branching, tree, node_variances)
    iv = None if item_variances is None else np.asarray(item_variances, dtype=np.float64)
    if method == "exact":
        P = span.weighted_projector(iv)
        out: FloatArray = P.T @ project_tree(X)
        return out
    if method == "approx":
        return restaurant_approximation(
            X,
            combos,
            branching,
            tree=tree,
            node_variances=node_variances,
            item_variances=item_variances,
            tol=tol,
        ).values
    C = restaurant_constraint_matrix(the_tree, span)
    w = _weights(the_tree, X.shape[0], s2, iv)
    if method == "dense":
        return dense_projection(X.ravel(), C.toarray(), weights=w).reshape(X.shape)
    if method == "sparse":
        return sparse_projection(X.ravel(), C, weights=w).reshape(X.shape)
    raise ConfigError(
        f"unknown restaurant method {method!r}; use 'exact', 'approx', 'dense' or 'sparse'"
    )
