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
from scipy.special import ndtr, ndtri

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
    k = _symmetric_quantile([_node_pmf(float(scale), h, noise) for scale in b], level)
    return k * h


def _symmetric_quantile(laws: list[npt.NDArray[np.float64]], level: float) -> int:
    """The smallest ``k`` with ``P(|X| <= k) >= level`` for ``X`` the sum of independent
    variables with the symmetric, odd-length, centred lattice laws ``laws`` (grid units)."""
    dist = np.ones(1)
    for law in laws:
        dist = np.clip(fftconvolve(dist, law), 0.0, None)
    dist /= dist.sum()
    centre = dist.shape[0] // 2
    # mass of |X| <= k for k = 0, 1, ...
    cum = np.cumsum(dist[centre:] + dist[centre::-1]) - dist[centre]
    return int(np.searchsorted(cum, level))


#: The most integers one node's discrete Gaussian is laid out on (+-12 sigma: the mass beyond
#: is below 1e-31); a wider node is binned from the continuous normal, which the discrete
#: Gaussian equals to float precision at such sigmas.
_MAX_ATOMS = 1 << 20


def _gaussian_node_pmf(weight: float, sigma: float, h: float) -> npt.NDArray[np.float64]:
    """The law of ``weight * z`` on the grid ``h * j``, ``z`` the discrete Gaussian of
    parameter ``sigma`` on the integers (each atom ``weight * k`` moved to its nearest grid
    point: by at most ``h / 2``, which :func:`gaussian_error_bound` adds back)."""
    span = math.ceil(12.0 * sigma) + 1
    if span <= _MAX_ATOMS:
        k = np.arange(-span, span + 1, dtype=np.float64)
        mass = np.exp(-0.5 * (k / sigma) ** 2)
        # at sigma << 1 every atom but 0 has no mass in float64; kept, the grid between them
        # (weight * k / h points, with h set by the other terms) took terabytes at a large rho
        k = k[mass > 0.0]
        mass = mass[mass > 0.0]
        where = np.rint(weight * k / h).astype(np.int64)
    else:  # continuous normal of the same scale, in bins of width h
        edge = math.ceil(12.0 * abs(weight) * sigma / h) + 1
        j = np.arange(-edge, edge + 2, dtype=np.float64)
        cdf = ndtr((j - 0.5) * h / (abs(weight) * sigma))
        mass, where = np.diff(cdf), np.arange(-edge, edge + 1, dtype=np.int64)
    where -= where.min()
    pmf = np.bincount(where, weights=mass)
    out: npt.NDArray[np.float64] = pmf / pmf.sum()
    return out


def gaussian_error_bound(
    weights: npt.NDArray[np.float64], sigmas: npt.NDArray[np.float64], level: float = 0.95
) -> float:
    """A ``q`` with ``P(|sum_i w_i z_i| <= q) >= level`` for independent discrete Gaussians
    ``z_i`` (parameters ``sigmas``) on the integers: the units of the weights.

    A sum of at most :data:`EXACT_MAX_NODES` terms is convolved on a lattice: the integers
    themselves when every weight is +-1 and the sum is narrow (exact: a binary tree's releases
    are integers, and the normal quantile ``1.96 sd`` covered as little as 91% of them at small
    sigmas), otherwise a grid of ``h = sd / 400`` with each term's atoms moved to the nearest
    grid point and ``n h / 2`` added to the quantile, so the bound holds whatever the grid.
    Longer sums are normal to within plotting accuracy and use its quantile.
    """
    w = np.asarray(weights, dtype=np.float64)
    s = np.asarray(sigmas, dtype=np.float64)
    variance = float(np.sum(w * w * s * s))
    quantile = float(ndtri(0.5 + 0.5 * level))
    if w.shape[0] > EXACT_MAX_NODES:
        return quantile * math.sqrt(variance)
    std = math.sqrt(variance)
    on_integers = bool(np.all(np.abs(w) == 1.0)) and std <= _GRID_POINTS_PER_STD
    h = 1.0 if on_integers else std / _GRID_POINTS_PER_STD
    laws = [
        _gaussian_node_pmf(weight, sigma, h)
        for weight, sigma in zip(w.tolist(), s.tolist(), strict=True)
    ]
    k = _symmetric_quantile(laws, level)
    return k * h if on_integers else k * h + w.shape[0] * h / 2
