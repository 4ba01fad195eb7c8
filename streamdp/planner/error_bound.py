"""The 95% error bound of a sum of independent Laplace node noises, from its exact distribution.

A release's running total ``s~_t`` carries the sum of the noises of the nodes on its read path.
:func:`error_bound` is the ``q`` with ``P(|s~_t - s_t| <= q) >= 0.95``, computed by numerical
convolution of the nodes' distributions on a lattice, not from a normal approximation (a single
Laplace node has a 95% bound of ``b ln 20 = 2.12 sigma``). When more than
:data:`EXACT_MAX_NODES` nodes are summed (naive mechanism, large t) the sum is normal to within
plotting accuracy (excess kurtosis at most ``3/n``) and the normal quantile is used.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.signal import fftconvolve
from scipy.special import ndtri

from streamdp.continual.variance import Noise, scale_variances

EXACT_MAX_NODES = 64
_GRID_POINTS_PER_STD = 400  # lattice resolution of the convolution
_TAIL = 40.0  # each node's distribution is kept to +-40 scales (mass beyond: e^-40)


def _node_pmf(scale: float, h: float, noise: Noise) -> npt.NDArray[np.float64]:
    """Distribution of one node's noise on the lattice ``h * k``; symmetric, sums to 1."""
    K = max(1, math.ceil(_TAIL * scale / h))
    k = np.arange(-K, K + 1, dtype=np.float64)
    if noise == "discrete-laplace" and h == 1.0:
        q = math.exp(-1.0 / scale)
        pmf = (1.0 - q) / (1.0 + q) * q ** np.abs(k)
    else:  # continuous Laplace (or a discrete one far coarser than its lattice) binned to h
        upper = np.abs(k) * h + 0.5 * h
        lower = np.maximum(np.abs(k) * h - 0.5 * h, 0.0)
        pmf = 0.5 * (np.exp(-lower / scale) - np.exp(-upper / scale))
        pmf[K] = 1.0 - math.exp(-0.5 * h / scale)
    out: npt.NDArray[np.float64] = pmf / pmf.sum()
    return out


def error_bound(scales: npt.NDArray[np.float64], noise: Noise, level: float = 0.95) -> float:
    """Smallest ``q`` with ``P(|sum of independent noises| <= q) >= level``; units of the scales.

    ``scales`` shape ``(n,)``: the Laplace scale of each summed node.
    """
    b = np.asarray(scales, dtype=np.float64)
    std = math.sqrt(float(np.sum(2.0 * b * b)))
    if b.shape[0] > EXACT_MAX_NODES:
        variance = float(np.sum(scale_variances(b, noise)))
        return float(ndtri(0.5 + 0.5 * level)) * math.sqrt(variance)
    h = std / _GRID_POINTS_PER_STD
    if noise == "discrete-laplace":
        h = max(1.0, float(round(h))) if h > 1.0 else 1.0
    dist = np.ones(1)
    for scale in b:
        dist = np.clip(fftconvolve(dist, _node_pmf(float(scale), h, noise)), 0.0, None)
    dist /= dist.sum()
    centre = dist.shape[0] // 2
    # mass of |X| <= k h for k = 0, 1, ...
    cum = np.cumsum(dist[centre:] + dist[centre::-1]) - dist[centre]
    k = int(np.searchsorted(cum, level))
    return k * h
