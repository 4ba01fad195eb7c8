"""Census-style associated attributes: total, k marginals and the k-way cells (seed 000).

Per region: the total ``t``, for each attribute i the marginal ``s^i`` (``n_i`` values) and the
cells ``m`` (a ``n_1 x ... x n_k`` table), with the public constraints (seed 000 eq. 6)

    t = sum_j s^i_j  (every i),        s^i_j = sum_{cells with z_i = j} m(z)  (every i, j).

Exact fast path (beyond the paper). A consistent release is fixed by its cells, so the weighted
least-squares problem is unconstrained in ``m``:

    min  w_t (t~ - 1^T m)^2 + sum_i w_i |s~^i - P_i m|^2 + w_m |m~ - m|^2.

Its normal matrix ``N = w_m I + sum_i w_i P_i^T P_i + w_t 1 1^T`` is a sum of Kronecker
products of identities and all-ones matrices, so it is diagonal in the ANOVA decomposition of
the table (grand mean; main effect of each axis; everything else), with eigenvalues

    grand mean:        w_m + sum_i w_i n / n_i + w_t n
    main effect of i:  w_m + w_i n / n_i
    interactions:      w_m.

Solving is a few axis means: O(n k) per region, vectorised over regions (processed in chunks
so that memory stays bounded). ``w`` are inverse noise variances of the three groups.

This is the production path (the engine's census revisions). The paper's method (seed 000:
FGMC on the k three-level trees in turn, to a tolerance) and the dense and sparse references it
is checked against are reproductions: :mod:`streamdp.papers.census_methods`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
CensusTriple = tuple[FloatArray, list[FloatArray], FloatArray]

_CHUNK_VALUES = 4_000_000  # cells processed per chunk by the exact path (~32 MB per temporary)


@dataclass(frozen=True)
class CensusVariances:
    """Noise variances of the three groups (the same for every value in a group).

    Attributes:
        total: variance of the noisy total.
        marginals: variance of each attribute's noisy marginal values, one per attribute.
        cells: variance of the noisy cells.
    """

    total: float
    marginals: tuple[float, ...]
    cells: float

    def weights(self, k: int) -> tuple[float, FloatArray, float]:
        values = (self.total, *self.marginals, self.cells)
        if len(self.marginals) != k or not all(np.isfinite(v) and v > 0 for v in values):
            raise ConfigError(
                f"census variances need one finite value > 0 for the total, each of the {k} "
                f"marginals and the cells; got {self}"
            )
        return (
            1.0 / self.total,
            1.0 / np.asarray(self.marginals, dtype=np.float64),
            1.0 / self.cells,
        )


def validate_census(
    total: npt.ArrayLike, marginals: Sequence[npt.ArrayLike], cells: npt.ArrayLike
) -> CensusTriple:
    t = np.asarray(total, dtype=np.float64)
    s = [np.asarray(mi, dtype=np.float64) for mi in marginals]
    m = np.asarray(cells, dtype=np.float64)
    k = len(s)
    if t.ndim != 1:
        raise ConfigError(f"total must have shape (R,), got {t.shape}")
    R = t.shape[0]
    if k < 1 or m.ndim != k + 1 or m.shape[0] != R:
        raise ConfigError(
            f"cells must have shape (R, n_1, ..., n_k) with R = {R} and k = {k} marginals; "
            f"got {m.shape}"
        )
    for i, mi in enumerate(s):
        if mi.shape != (R, m.shape[i + 1]):
            raise ConfigError(
                f"marginal {i} has shape {mi.shape}, expected ({R}, {m.shape[i + 1]}) "
                "to match the cells"
            )
    for name, arr in [
        ("total", t),
        ("cells", m),
        *((f"marginal {i}", mi) for i, mi in enumerate(s)),
    ]:
        if not np.all(np.isfinite(arr)):
            raise ConfigError(f"{name} contains non-finite values; pass finite noisy counts")
    return t, s, m


def _expand(values: FloatArray, axis: int, ndim: int) -> FloatArray:
    """Reshape (R, n_i) so it broadcasts along cell axis ``axis`` of an (R, n_1..n_k) table."""
    shape = [values.shape[0]] + [1] * (ndim - 1)
    shape[axis + 1] = values.shape[1]
    return values.reshape(shape)


def _exact_chunk(
    t: FloatArray,
    s: list[FloatArray],
    m: FloatArray,
    *,
    wt: float,
    wi: FloatArray,
    wm: float,
) -> CensusTriple:
    k = len(s)
    ndim = m.ndim
    sizes = m.shape[1:]
    n = float(np.prod(sizes))
    cell_axes = tuple(range(1, ndim))
    r = m * wm
    for i in range(k):
        r += _expand(s[i] * wi[i], i, ndim)
    r += (t * wt).reshape((-1,) + (1,) * k)
    grand = r.mean(axis=cell_axes)
    lam_all = wm + float(np.sum(wi * n / np.asarray(sizes))) + wt * n
    out = r / wm
    out += (grand * (1.0 / lam_all - 1.0 / wm)).reshape((-1,) + (1,) * k)
    for i in range(k):
        others = tuple(a for a in cell_axes if a != i + 1)
        main = (r.mean(axis=others) if others else r) - grand[:, None]
        lam_i = wm + wi[i] * n / sizes[i]
        out += _expand(main * (1.0 / lam_i - 1.0 / wm), i, ndim)
    marg = [
        out.sum(axis=tuple(a for a in cell_axes if a != i + 1)) if k > 1 else out.copy()
        for i in range(k)
    ]
    tot = out.sum(axis=cell_axes)
    return tot, marg, out


def census_exact(
    total: npt.ArrayLike,
    marginals: Sequence[npt.ArrayLike],
    cells: npt.ArrayLike,
    variances: CensusVariances | None = None,
) -> CensusTriple:
    """Exact weighted consistent release by the ANOVA closed form, O(n k) per region."""
    t, s, m = validate_census(total, marginals, cells)
    k = len(s)
    wt, wi, wm = (1.0, np.ones(k), 1.0) if variances is None else variances.weights(k)
    R = t.shape[0]
    n = int(np.prod(m.shape[1:]))
    step = max(1, _CHUNK_VALUES // max(n, 1))
    if step >= R:
        return _exact_chunk(t, s, m, wt=wt, wi=wi, wm=wm)
    out_t = np.empty_like(t)
    out_s = [np.empty_like(si) for si in s]
    out_m = np.empty_like(m)
    for lo in range(0, R, step):
        hi = min(R, lo + step)
        ct, cs, cm = _exact_chunk(t[lo:hi], [si[lo:hi] for si in s], m[lo:hi], wt=wt, wi=wi, wm=wm)
        out_t[lo:hi] = ct
        for i in range(k):
            out_s[i][lo:hi] = cs[i]
        out_m[lo:hi] = cm
    return out_t, out_s, out_m


def census_projected_variances(
    sizes: Sequence[int],
    total: npt.ArrayLike,
    marginals: npt.ArrayLike,
    cells: npt.ArrayLike,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The noise variance of every value of :func:`census_exact`'s weighted release, O(k).

    The release is the GLS estimate under the groups' variances, so its cells' covariance is
    ``N^-1`` (the normal matrix of the module docstring) and a released value ``a^T m`` has
    variance ``a^T N^-1 a``. In the ANOVA decomposition ``N^-1`` is ``1/lambda`` on each
    eigenspace, and the values of one group share a variance (``n = prod n_i``):

        cell:         1/(n L_0) + sum_i (n_i - 1)/(n L_i) + (1 - 1/n - sum_i (n_i - 1)/n)/w_m
        marginal i:   n/(n_i^2 L_0) + (n/n_i)(1 - 1/n_i)/L_i
        total:        n/L_0

    with ``L_0`` the grand-mean eigenvalue and ``L_i`` the main effect's of attribute ``i``.

    Args:
        sizes: categories per attribute ``(n_1, ..., n_k)``.
        total: noisy total's variance per row, shape (R,).
        marginals: each attribute's noisy marginal variance per row, shape (R, k).
        cells: noisy cells' variance per row, shape (R,).

    Returns:
        (total, marginals, cells) variances after the projection, shapes (R,), (R, k), (R,).
    """
    n_i = np.asarray(sizes, dtype=np.float64)
    n = float(np.prod(n_i))
    wt = 1.0 / np.asarray(total, dtype=np.float64)
    wi = 1.0 / np.atleast_2d(np.asarray(marginals, dtype=np.float64))
    wm = 1.0 / np.asarray(cells, dtype=np.float64)
    if wi.shape[1] != n_i.shape[0]:
        raise ConfigError(f"{wi.shape[1]} marginal variances for {n_i.shape[0]} attributes")
    main = wm[:, None] + wi * (n / n_i)  # L_i, (R, k)
    grand = wm + (wi * (n / n_i)).sum(axis=1) + wt * n  # L_0, (R,)
    rest = 1.0 - 1.0 / n - float(np.sum(n_i - 1.0)) / n
    cell: FloatArray = 1.0 / (n * grand) + ((n_i - 1.0) / n / main).sum(axis=1) + rest / wm
    marginal: FloatArray = n / (n_i**2 * grand[:, None]) + (n / n_i) * (1.0 - 1.0 / n_i) / main
    total_out: FloatArray = n / grand
    return total_out, marginal, cell


def census_residuals(
    total: FloatArray, marginals: list[FloatArray], cells: FloatArray
) -> FloatArray:
    """All constraint residuals per region, shape (R, k + sum n_i): zero when consistent."""
    k = len(marginals)
    cell_axes = tuple(range(1, cells.ndim))
    parts = [(total - mi.sum(axis=1))[:, None] for mi in marginals]
    for i, mi in enumerate(marginals):
        others = tuple(a for a in cell_axes if a != i + 1)
        parts.append(mi - (cells.sum(axis=others) if others else cells))
    del k
    return np.concatenate(parts, axis=1)
