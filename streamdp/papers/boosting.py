"""Boosting (Hay, Rastogi, Miklau, Suciu, VLDB 2010) for complete k-ary trees, O(n).

Equal noise on every node. With levels numbered by height (leaves have height 1), the
bottom-up pass computes

    z_v = x_v                                                     (leaf)
    z_v = (k^l - k^(l-1)) / (k^l - 1) x_v + (k^(l-1) - 1) / (k^l - 1) sum_{c} z_c   (height l)

and the top-down pass ``y_root = z_root``, ``y_c = z_c + (y_parent - sum_{siblings} z) / k``.
The tree is complete and breadth-first, so each level is one reshape: the whole pass is
``2 h`` vectorised operations over arrays of shape ``(..., k^l, k)``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError
from streamdp.papers.tree import complete_height

FloatArray = npt.NDArray[np.float64]


def boosting(values: npt.ArrayLike, branching: int = 2) -> FloatArray:
    """Hay et al.'s optimal consistent release of a complete ``branching``-ary tree.

    Args:
        values: noisy node values, shape (..., nodes), breadth-first (root first, leaves last),
            ``nodes = (b^(h+1) - 1) / (b - 1)``; leading axes (e.g. items) are independent trees.
        branching: the tree's fan-out ``b >= 2``.

    Returns:
        Consistent values with the least squared distance to ``values``, shape (..., nodes).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim < 1:
        raise ConfigError("values must have a trailing node axis")
    k = branching
    h = complete_height(x.shape[-1], k)
    starts = [(k**level - 1) // (k - 1) for level in range(h + 2)]
    lead = x.shape[:-1]
    z = x.copy()
    child_sum: list[FloatArray] = [np.zeros(0)] * (h + 1)
    for level in range(h - 1, -1, -1):
        height = h - level + 1
        kids = z[..., starts[level + 1] : starts[level + 2]].reshape(*lead, k**level, k)
        s = kids.sum(axis=-1)
        child_sum[level] = s
        a = (k**height - k ** (height - 1)) / (k**height - 1)
        z[..., starts[level] : starts[level + 1]] = (
            a * z[..., starts[level] : starts[level + 1]] + (1.0 - a) * s
        )
    y = z.copy()
    for level in range(h):
        parent = y[..., starts[level] : starts[level + 1]]
        gap = (parent - child_sum[level]) / k
        kids = z[..., starts[level + 1] : starts[level + 2]].reshape(*lead, k**level, k)
        y[..., starts[level + 1] : starts[level + 2]] = (kids + gap[..., None]).reshape(
            *lead, k ** (level + 1)
        )
    return y
