"""The trees the papers build (complete k-ary trees, range trees over days) and the tree type
and node-value checks they share with the production path.

:class:`Tree` (a rooted tree as its parent array in breadth-first order), :func:`tree_values`,
:func:`tree_variances` and :func:`child_sums` live in :mod:`streamdp.consistency.tree` with
the exact two-pass projection; they are re-exported here for the reproductions. The
constraint of a tree is "every internal node equals the sum of its children"; its solvers are
:func:`streamdp.consistency.tree.tree_projection`, :mod:`streamdp.papers.tree_passes` (seed
003's passes) and :mod:`streamdp.papers.gmc` (generation matrix).
"""

from __future__ import annotations

import numpy as np

from streamdp.consistency.tree import (
    FloatArray,
    IntArray,
    Tree,
    child_sums,
    tree_values,
    tree_variances,
)
from streamdp.errors import ConfigError

__all__ = [
    "FloatArray",
    "IntArray",
    "Tree",
    "child_sums",
    "complete_height",
    "complete_tree",
    "dyadic_tree",
    "tree_values",
    "tree_variances",
]


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
