"""FGMC: the closed form of the three-level tree (seed 000, eq. 32-33), vectorised.

The tree of one attribute of census-style data: root = the total ``t``, ``k1 = n_i`` middle
nodes = the attribute's marginal ``s^i``, each with ``k2 = n / n_i`` leaves = the cells. With
the inconsistencies ``d_0 = t - sum_j s_j`` and ``d_j = s_j - sum_{cells under j} m`` and

    w = 1 + k2,    r = 1 + k2 + k1 k2,    mu_0 = (w d_0 + d_s) / r,   d_s = sum_j d_j,

the unweighted optimal consistent release subtracts

    A_0 = mu_0,    A_j = d_j / w - k2 mu_0 / w,    A_leaf(j) = -(d_j + mu_0) / w

(eq. 32; the extracted paper prints ``d_0 t`` in ``A_0``, a lost ``w``: a direct solve gives
``w d_0``, which the tests check against the dense reference).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]


def fgmc_three_level(
    total: npt.ArrayLike, marginal: npt.ArrayLike, cells: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Optimal consistent release of a three-level tree, for every region at once.

    Args:
        total: shape (R,), the root of each region's tree.
        marginal: shape (R, k1), the middle level.
        cells: shape (R, k1, k2), the leaves, grouped under their middle node.

    Returns:
        ``(total, marginal, cells)`` with ``total = sum marginal`` and ``marginal = sum cells``
        over the last axis, each region projected (unweighted) onto its tree's constraints.
    """
    t = np.asarray(total, dtype=np.float64)
    s = np.asarray(marginal, dtype=np.float64)
    m = np.asarray(cells, dtype=np.float64)
    if (
        t.ndim != 1
        or s.ndim != 2
        or m.ndim != 3
        or s.shape[0] != t.shape[0]
        or m.shape[:2] != s.shape
    ):
        raise ConfigError(
            f"shapes total {t.shape}, marginal {s.shape}, cells {m.shape} do not form "
            "(R,), (R, k1), (R, k1, k2)"
        )
    k1, k2 = s.shape[1], m.shape[2]
    w = 1.0 + k2
    r = 1.0 + k2 + k1 * k2
    d0 = t - s.sum(axis=1)
    d = s - m.sum(axis=2)
    mu0 = (w * d0 + d.sum(axis=1)) / r
    t_new = t - mu0
    s_new = s - (d - k2 * mu0[:, None]) / w
    m_new = m + ((d + mu0[:, None]) / w)[:, :, None]
    return t_new, s_new, m_new
