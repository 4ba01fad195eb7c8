"""A rooted tree stored as its parent array, the shapes the papers use, and node-value checks.

A tree is stored as its parent array in breadth-first order (root = node 0, ``parent[0] = -1``,
parents non-decreasing), so every level and every node's children are contiguous slices and
each pass over it is a handful of vectorised operations per level. Values have shape
``(..., nodes)``: any leading axes (items, regions) are processed together. The constraint of a
tree is "every internal node equals the sum of its children"; its solvers are in
:mod:`streamdp.papers.tree_passes` (two-pass) and :mod:`streamdp.papers.gmc` (generation matrix).
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


def complete_tree(branching: int, height: int) -> Tree:
    """Complete ``branching``-ary tree with ``branching**height`` leaves, breadth-first."""
    if branching < 2 or height < 0:
        raise ConfigError(
            f"complete tree needs branching >= 2 and height >= 0, got {branching}, {height}"
        )
    internal = (branching**height - 1) // (branching - 1)
    size = (branching ** (height + 1) - 1) // (branching - 1)
    parent = np.empty(size, dtype=np.int64)
    parent[0] = -1
    parent[1:] = np.repeat(np.arange(internal), branching)
    return Tree(parent)


def complete_height(nodes: int, branching: int) -> int:
    """Height h with ``nodes == (b^(h+1) - 1) / (b - 1)``, or ConfigError if there is none."""
    if branching < 2:
        raise ConfigError(f"branching must be >= 2, got {branching}")
    size, height = 1, 0
    while size < nodes:
        height += 1
        size = (branching ** (height + 1) - 1) // (branching - 1)
    if size != nodes:
        raise ConfigError(
            f"{nodes} nodes is not a complete {branching}-ary tree (sizes are "
            f"(b^(h+1)-1)/(b-1)); pad the days to a power of {branching} "
            "or pass tree=dyadic_tree(T)"
        )
    return height


def dyadic_tree(leaves: int, branching: int = 2) -> Tree:
    """The ``branching``-ary range tree over ``leaves`` days, with empty ranges dropped.

    Level l splits [0, T) into blocks of ``branching^(H-l)`` days (H = ceil(log_b T)); blocks
    that start at or after T are omitted, so any T works without padding. A node with a single
    child keeps it (its constraint says the two are equal). Leaves are the days, in order.
    """
    if leaves < 1 or branching < 2:
        raise ConfigError(
            f"dyadic tree needs leaves >= 1 and branching >= 2, got {leaves}, {branching}"
        )
    height = 0
    while branching**height < leaves:
        height += 1
    parents = [np.array([-1], dtype=np.int64)]
    offset = 0
    count = 1
    for level in range(1, height + 1):
        block = branching ** (height - level)
        n_level = -(-leaves // block)
        idx = np.arange(n_level)
        parents.append(offset + idx // branching)
        offset += count
        count = n_level
    return Tree(np.concatenate(parents))


def tree_values(values: npt.ArrayLike, tree: Tree) -> FloatArray:
    """``values`` as floats of shape ``(..., nodes)``, or :class:`ConfigError`."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] != tree.size:
        raise ConfigError(
            f"values have shape {x.shape}; the last axis must be the {tree.size} nodes"
        )
    return x


def tree_variances(variances: npt.ArrayLike | None, tree: Tree) -> FloatArray:
    """Per-node noise variances, shape ``(nodes,)``, finite and > 0 (ones when omitted)."""
    if variances is None:
        return np.ones(tree.size)
    v = np.asarray(variances, dtype=np.float64)
    if v.shape != (tree.size,):
        raise ConfigError(f"variances have shape {v.shape}, expected ({tree.size},): one per node")
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ConfigError("node noise variances must be finite and > 0")
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
