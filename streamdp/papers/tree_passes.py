"""Consistency on a tree by two passes (bottom-up, then top-down), O(nodes).

- :func:`tree_projection` — the exact weighted least-squares projection (production path,
  :mod:`streamdp.consistency.tree`; re-exported here). For a complete k-ary tree with equal
  variances it is Hay et al.'s Boosting (see ``boosting.py``).
- :func:`seed003_two_pass` — seed 003's extension of Hay's passes to arbitrary trees with
  ``leafnum/totalnum`` coefficients and an equal split. Exact on complete k-ary trees with
  equal variances; on unbalanced trees it is consistent but not optimal (shown in the tests).

Trees and value shapes as in :mod:`streamdp.papers.tree`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.consistency.tree import (
    FloatArray,
    Tree,
    child_sums,
    tree_projection,
    tree_values,
)

__all__ = ["seed003_two_pass", "tree_projection"]


def seed003_two_pass(values: npt.ArrayLike, tree: Tree) -> FloatArray:
    """Seed 003's constrained inference on an arbitrary tree (equal noise), two passes.

    Bottom-up: ``rest(i) = (leafnum(i) x_i + (totalnum(i) - leafnum(i)) sum_children rest) /
    totalnum(i)``; top-down: each child gets an equal share of ``rest(parent) - sum of the
    children's rest``. Equal to Hay et al.'s Boosting on complete k-ary trees; on other trees
    the result is consistent but in general not the least-squares optimum.

    Args:
        values: noisy node values, shape (..., nodes).
        tree: the tree.

    Returns:
        Consistent node values, shape (..., nodes).
    """
    x = tree_values(values, tree)
    leafnum = tree.leaf_count.astype(np.float64)
    total = tree.subtree_size.astype(np.float64)
    z = x.copy()
    cz = np.zeros_like(x)
    bounds = tree.level_bounds
    for start, stop in reversed(bounds[:-1]):
        sz = child_sums(z, tree, start, stop)
        cz[..., start:stop] = sz
        has = tree.child_count[start:stop] > 0
        ln, tn = leafnum[start:stop], total[start:stop]
        merged = (ln * z[..., start:stop] + (tn - ln) * sz) / tn
        z[..., start:stop] = np.where(has, merged, z[..., start:stop])
    y = z.copy()
    for start, stop in bounds[1:]:
        p = tree.parent[start:stop]
        y[..., start:stop] = z[..., start:stop] + (y[..., p] - cz[..., p]) / tree.child_count[p]
    return y
