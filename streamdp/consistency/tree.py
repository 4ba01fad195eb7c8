"""Consistency on a public tree (seed 003; DESIGN §4): a rooted tree stored as its parent array,
and the exact weighted least-squares projection onto "every internal node equals the sum of its
children" in two passes, O(nodes).

A tree is stored as its parent array in breadth-first order (root = node 0, ``parent[0] = -1``,
parents non-decreasing), so every level and every node's children are contiguous slices and
each pass over it is a handful of vectorised operations per level. Values have shape
``(..., nodes)``: any leading axes (periods, attribute cells) are processed together.

- :func:`tree_projection` — bottom-up, combine each node's own value with its children's
  subtree estimate by inverse-variance weighting; top-down, share the parent's discrepancy
  among the children in proportion to their subtree variances. For a complete k-ary tree with
  equal variances it is Hay et al.'s Boosting; on any tree it equals the dense GLS solve.
- :func:`tree_projection_variances` — the exact noise variance of every projected node (the
  diagonal of the GLS covariance), by the same two passes.

The production path (the ``places`` stream kind, :mod:`streamdp.kinds.places`) and the paper
reproductions (:mod:`streamdp.papers`) share this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Tree:
    """A rooted tree in breadth-first order, given by its parent array.

    Attributes:
        parent: shape (nodes,), ``parent[0] == -1``, ``parent[i] < i`` and non-decreasing for
            ``i >= 1`` (breadth-first numbering: children of a node are contiguous).
    """

    parent: IntArray

    def __post_init__(self) -> None:
        p = np.asarray(self.parent, dtype=np.int64)
        object.__setattr__(self, "parent", p)
        if p.ndim != 1 or p.size == 0 or p[0] != -1:
            raise ConfigError("a tree's parent array must be 1-D, non-empty, with parent[0] == -1")
        rest = p[1:]
        if rest.size and (
            np.any(rest < 0) or np.any(rest >= np.arange(1, p.size)) or np.any(np.diff(rest) < 0)
        ):
            raise ConfigError(
                "parent array is not in breadth-first order: need 0 <= parent[i] < i and "
                "parent non-decreasing for i >= 1 (renumber the nodes level by level)"
            )

    @property
    def size(self) -> int:
        return int(self.parent.shape[0])

    @cached_property
    def child_count(self) -> IntArray:
        """Number of children of each node, shape (nodes,)."""
        return np.bincount(self.parent[1:], minlength=self.size).astype(np.int64)

    @cached_property
    def first_child(self) -> IntArray:
        """Index of each node's first child (meaningless where ``child_count == 0``)."""
        starts = np.searchsorted(self.parent[1:], np.arange(self.size), side="left") + 1
        return starts.astype(np.int64)

    @cached_property
    def level_bounds(self) -> list[tuple[int, int]]:
        """``[(start, stop), ...]`` of each level, root level first."""
        bounds: list[tuple[int, int]] = []
        start, stop = 0, 1
        while start < self.size:
            bounds.append((start, stop))
            kids = int(self.child_count[start:stop].sum())
            start, stop = stop, stop + kids
        return bounds

    @cached_property
    def depth(self) -> IntArray:
        """Each node's level (root 0), shape (nodes,)."""
        depth = np.zeros(self.size, dtype=np.int64)
        for level, (start, stop) in enumerate(self.level_bounds):
            depth[start:stop] = level
        return depth

    @cached_property
    def leaves(self) -> IntArray:
        return np.flatnonzero(self.child_count == 0).astype(np.int64)

    @cached_property
    def internal(self) -> IntArray:
        return np.flatnonzero(self.child_count > 0).astype(np.int64)

    @cached_property
    def leaf_count(self) -> IntArray:
        """``leafnum`` of seed 003: leaves under each node (1 for a leaf)."""
        counts: IntArray = np.asarray(self.child_count == 0, dtype=np.int64)
        for start, stop in reversed(self.level_bounds[1:]):
            np.add.at(counts, self.parent[start:stop], counts[start:stop])
        return counts

    @cached_property
    def subtree_size(self) -> IntArray:
        """``totalnum`` of seed 003: nodes in each node's subtree (itself included)."""
        counts = np.ones(self.size, dtype=np.int64)
        for start, stop in reversed(self.level_bounds[1:]):
            np.add.at(counts, self.parent[start:stop], counts[start:stop])
        return counts

    def constraint_matrix(self) -> sp.csr_matrix:
        """Sparse ``C`` (internal nodes x nodes): row q is ``y_q - sum_{c child of q} y_c``."""
        internal = self.internal
        row_of = -np.ones(self.size, dtype=np.int64)
        row_of[internal] = np.arange(internal.size)
        kids = np.arange(1, self.size)
        rows = np.concatenate([np.arange(internal.size), row_of[self.parent[1:]]])
        cols = np.concatenate([internal, kids])
        vals = np.concatenate([np.ones(internal.size), -np.ones(kids.size)])
        return sp.csr_matrix((vals, (rows, cols)), shape=(internal.size, self.size))

    def aggregation_matrix(self) -> sp.csr_matrix:
        """Sparse ``A`` (nodes x leaves): node value = sum of the leaves under it."""
        leaves = self.leaves
        rows_list = [leaves]
        cols_list = [np.arange(leaves.size)]
        node = leaves.copy()
        col = np.arange(leaves.size)
        while node.size:
            up = self.parent[node]
            keep = up >= 0
            node, col = up[keep], col[keep]
            rows_list.append(node)
            cols_list.append(col)
        rows = np.concatenate(rows_list)
        cols = np.concatenate(cols_list)
        return sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(self.size, leaves.size))


def tree_values(values: npt.ArrayLike, tree: Tree) -> FloatArray:
    """``values`` as floats of shape ``(..., nodes)``, or :class:`ConfigError`."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] != tree.size:
        raise ConfigError(
            f"values have shape {x.shape}; the last axis must be the {tree.size} nodes"
        )
    return x


def tree_variances(variances: npt.ArrayLike | None, tree: Tree) -> FloatArray:
    """Per-node noise variances, shape ``(..., nodes)`` (one vector for every row, or one per
    row of the values they weight), finite and > 0 (ones when omitted)."""
    if variances is None:
        return np.ones(tree.size)
    v = np.asarray(variances, dtype=np.float64)
    if v.ndim < 1 or v.shape[-1] != tree.size:
        raise ConfigError(
            f"variances have shape {v.shape}, expected (..., {tree.size}): one per node"
        )
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        bad = np.flatnonzero(~np.isfinite(v.reshape(-1)) | (v.reshape(-1) <= 0))
        raise ConfigError(
            f"node noise variances must be finite and > 0, got {v.reshape(-1)[bad[0]]} at "
            f"flat index {int(bad[0])} ({bad.size} such)"
        )
    return v


def child_sums(x: FloatArray, tree: Tree, start: int, stop: int) -> FloatArray:
    """Sum of the children of nodes ``start..stop-1`` along the last axis (0 for leaves)."""
    counts = tree.child_count[start:stop]
    out = np.zeros((*x.shape[:-1], stop - start))
    has = np.flatnonzero(counts > 0)
    if has.size:
        firsts = tree.first_child[start:stop][has]
        lo, hi = int(firsts[0]), int(firsts[-1] + counts[has[-1]])
        out[..., has] = np.add.reduceat(x[..., lo:hi], firsts - lo, axis=-1)
    return out


def tree_projection(
    values: npt.ArrayLike, tree: Tree, variances: npt.ArrayLike | None = None
) -> FloatArray:
    """Exact weighted projection onto "node = sum of children", two passes, O(nodes).

    Minimises ``sum_v (y_v - x_v)^2 / sigma_v^2`` subject to tree consistency.

    Args:
        values: noisy node values, shape (..., nodes), breadth-first order.
        tree: the tree.
        variances: per-node noise variances ``sigma_v^2``, shape (nodes,), or broadcastable
            against ``values`` (e.g. (n, 1, nodes): each row its own); equal when omitted.

    Returns:
        Consistent node values, shape (..., nodes).
    """
    x = tree_values(values, tree)
    s2 = tree_variances(variances, tree)
    z = x.copy()
    u = s2.copy()
    cz = np.zeros_like(x)
    cu = np.zeros_like(u)
    bounds = tree.level_bounds
    for start, stop in reversed(bounds[:-1]):
        sz = child_sums(z, tree, start, stop)
        su = child_sums(u, tree, start, stop)
        has = tree.child_count[start:stop] > 0
        cz[..., start:stop] = sz
        cu[..., start:stop] = su
        own = s2[..., start:stop]
        safe = np.where(has, su, 1.0)
        merged = (z[..., start:stop] * safe + sz * own) / (safe + own)
        z[..., start:stop] = np.where(has, merged, z[..., start:stop])
        u[..., start:stop] = np.where(has, own * safe / (safe + own), u[..., start:stop])
    y = z.copy()
    for start, stop in bounds[1:]:
        p = tree.parent[start:stop]
        share = u[..., start:stop] / cu[..., p]
        y[..., start:stop] = z[..., start:stop] + share * (y[..., p] - cz[..., p])
    return y


def tree_projection_variances(tree: Tree, variances: npt.ArrayLike | None = None) -> FloatArray:
    """The noise variance of every node after :func:`tree_projection`, shape (nodes,), O(nodes).

    The projection is the GLS estimate, so its error covariance is ``(C^T W C)``-restricted
    inverse; its diagonal follows the same two passes. Bottom-up, ``u_v`` is the variance of the
    subtree estimate ``z_v`` (a leaf: its own variance; an internal node: its own variance and
    its children's summed ``u`` combined as parallel resistors). Top-down, the root keeps
    ``f_root = u_root``, and a child ``v`` of ``p`` (children's summed ``u`` being ``U_p``) gets
    Gaussian conditioning on the parent's final estimate:

        f_v = u_v - (u_v / U_p)^2 (U_p - f_p).

    With equal variances ``sigma^2`` this is ``sigma^2 P_vv``, ``P`` the orthogonal projector
    onto the consistent subspace (checked against the dense Moore-Penrose solve in the tests).

    Args:
        tree: the tree.
        variances: per-node noise variances before projection, shape (..., nodes) (each
            leading index its own set); ones when omitted (then the result is the diagonal of
            the orthogonal projector).

    Returns:
        per-node variances after projection, the shape of ``variances``.
    """
    s2 = tree_variances(variances, tree)
    u = s2.copy()
    cu = np.zeros_like(u)
    bounds = tree.level_bounds
    for start, stop in reversed(bounds[:-1]):
        su = child_sums(u, tree, start, stop)
        has = tree.child_count[start:stop] > 0
        cu[..., start:stop] = su
        own = s2[..., start:stop]
        safe = np.where(has, su, 1.0)
        u[..., start:stop] = np.where(has, own * safe / (safe + own), u[..., start:stop])
    f = u.copy()
    for start, stop in bounds[1:]:
        p = tree.parent[start:stop]
        share = u[..., start:stop] / cu[..., p]
        f[..., start:stop] = u[..., start:stop] - share * share * (cu[..., p] - f[..., p])
    return f
