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

The paper's method (``method="fgmc"``): split into the k three-level trees (t, s^i, m) and apply
the FGMC closed form to each in turn until the mean absolute change per region is < tol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from streamdp.consistency.fgmc import fgmc_three_level
from streamdp.consistency.reference import dense_projection
from streamdp.consistency.sparse import sparse_projection
from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
CensusMethod = Literal["exact", "fgmc", "dense", "sparse"]
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


@dataclass(frozen=True)
class CensusApproximation:
    """Result of the FGMC approximation.

    Attributes:
        total, marginals, cells: the release after the last sweep.
        iterations: sweeps each region needed, shape (R,).
        deviations: mean squared constraint residual over all regions after each sweep.
    """

    total: FloatArray
    marginals: list[FloatArray]
    cells: FloatArray
    iterations: npt.NDArray[np.int64]
    deviations: tuple[float, ...]


def _validate(
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
    t, s, m = _validate(total, marginals, cells)
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


def _fgmc_sweep(
    t: FloatArray, s: list[FloatArray], m: FloatArray
) -> tuple[FloatArray, list[FloatArray], FloatArray]:
    s = list(s)
    R = m.shape[0]
    for i in range(len(s)):
        moved = np.moveaxis(m, i + 1, 1)
        shape = moved.shape
        t, s[i], grouped = fgmc_three_level(t, s[i], moved.reshape(R, shape[1], -1))
        m = np.moveaxis(grouped.reshape(shape), 1, i + 1)
    return t, s, np.ascontiguousarray(m)


def census_approximation(
    total: npt.ArrayLike,
    marginals: Sequence[npt.ArrayLike],
    cells: npt.ArrayLike,
    *,
    tol: float = 1e-6,
    max_iter: int = 10_000,
) -> CensusApproximation:
    """Seed 000's method: FGMC on the k three-level trees in turn, per region until converged.

    A region stops after the first sweep whose mean absolute change (over its total, marginals
    and cells) is below ``tol``; the others continue, vectorised.
    """
    t, s, m = _validate(total, marginals, cells)
    if tol <= 0 or max_iter < 1:
        raise ConfigError(f"need tol > 0 and max_iter >= 1, got {tol}, {max_iter}")
    R = t.shape[0]
    count = 1 + sum(si.shape[1] for si in s) + int(np.prod(m.shape[1:]))
    out_t, out_s, out_m = t.copy(), [si.copy() for si in s], m.copy()
    iterations = np.zeros(R, dtype=np.int64)
    active = np.arange(R)
    at, as_, am = t.copy(), [si.copy() for si in s], m.copy()
    deviations: list[float] = []
    for sweep in range(1, max_iter + 1):
        nt, ns, nm = _fgmc_sweep(at, as_, am)
        change = np.abs(nt - at)
        for a, b in zip(ns, as_, strict=True):
            change += np.abs(a - b).sum(axis=1)
        change += np.abs(nm - am).reshape(nm.shape[0], -1).sum(axis=1)
        change /= count
        at, as_, am = nt, ns, nm
        out_t[active] = at
        for i in range(len(s)):
            out_s[i][active] = as_[i]
        out_m[active] = am
        res = census_residuals(out_t, out_s, out_m)
        deviations.append(float(np.mean(res * res)))
        done = change < tol
        iterations[active[done]] = sweep
        if np.all(done):
            active = active[:0]
            break
        if np.any(done):
            keep = ~done
            active = active[keep]
            at, as_, am = at[keep], [x[keep] for x in as_], am[keep]
    iterations[active] = max_iter
    return CensusApproximation(out_t, out_s, out_m, iterations, tuple(deviations))


def census_constraint_matrix(sizes: Sequence[int]) -> sp.csr_matrix:
    """Sparse constraints of one region over ``[t, s^1, ..., s^k, m (C order)]``."""
    k = len(sizes)
    n = int(np.prod(sizes))
    offsets = np.cumsum([1, *sizes])  # start of s^i, last = start of m
    n_vars = int(offsets[-1]) + n
    rows: list[npt.NDArray[np.int64]] = []
    cols: list[npt.NDArray[np.int64]] = []
    vals: list[FloatArray] = []
    row = 0
    for i in range(k):  # t - sum_j s^i_j
        rows.append(np.full(1 + sizes[i], row))
        cols.append(np.concatenate([[0], offsets[i] + np.arange(sizes[i])]))
        vals.append(np.concatenate([[1.0], -np.ones(sizes[i])]))
        row += 1
    index = np.indices(tuple(sizes)).reshape(k, n)
    for i in range(k):  # s^i_j - sum_{z_i = j} m(z)
        rows.append(row + np.arange(sizes[i]))
        cols.append(offsets[i] + np.arange(sizes[i]))
        vals.append(np.ones(sizes[i]))
        rows.append(row + index[i])
        cols.append(int(offsets[-1]) + np.arange(n))
        vals.append(-np.ones(n))
        row += sizes[i]
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, n_vars)
    )


def _flatten(t: FloatArray, s: list[FloatArray], m: FloatArray) -> FloatArray:
    return np.concatenate([t[:, None], *s, m.reshape(m.shape[0], -1)], axis=1)


def _unflatten(flat: FloatArray, sizes: Sequence[int]) -> CensusTriple:
    R = flat.shape[0]
    offsets = np.cumsum([1, *sizes])
    marg = [flat[:, offsets[i] : offsets[i + 1]].copy() for i in range(len(sizes))]
    return flat[:, 0].copy(), marg, flat[:, offsets[-1] :].reshape(R, *sizes).copy()


def _flat_weights(sizes: Sequence[int], variances: CensusVariances | None) -> FloatArray:
    k = len(sizes)
    wt, wi, wm = (1.0, np.ones(k), 1.0) if variances is None else variances.weights(k)
    parts = [np.array([wt])] + [np.full(sizes[i], wi[i]) for i in range(k)]
    parts.append(np.full(int(np.prod(sizes)), wm))
    return np.concatenate(parts)


def census_release(
    total: npt.ArrayLike,
    marginals: Sequence[npt.ArrayLike],
    cells: npt.ArrayLike,
    method: CensusMethod = "exact",
    *,
    variances: CensusVariances | None = None,
    tol: float = 1e-6,
) -> CensusTriple:
    """Optimal consistent (total, marginals, cells) for every region.

    Args:
        total: noisy totals, shape (R,).
        marginals: k arrays, the i-th of shape (R, n_i): noisy counts per category of attribute i.
        cells: noisy k-way cells, shape (R, n_1, ..., n_k).
        method: ``"exact"`` (ANOVA closed form, O(n k) per region), ``"fgmc"`` (seed 000: FGMC
            on each attribute's three-level tree in turn, to ``tol``; unweighted only),
            ``"dense"`` (Moore-Penrose reference, per region; small inputs only),
            ``"sparse"`` (general sparse solver).
        variances: noise variances of total / each marginal / cells (all equal when omitted).
        tol: stopping threshold of ``"fgmc"``.

    Returns:
        ``(total (R,), [marginal_i (R, n_i)], cells (R, n_1, ..., n_k))``, consistent per region.
    """
    t, s, m = _validate(total, marginals, cells)
    sizes = list(m.shape[1:])
    if method == "exact":
        return census_exact(t, s, m, variances)
    if method == "fgmc":
        if variances is not None:
            raise ConfigError(
                "method 'fgmc' is unweighted (seed 000); use method='exact' with variances"
            )
        result = census_approximation(t, s, m, tol=tol)
        return result.total, result.marginals, result.cells
    flat = _flatten(t, s, m)
    C = census_constraint_matrix(sizes)
    weights = _flat_weights(sizes, variances)
    if method == "dense":
        dense = C.toarray()
        out = np.stack([dense_projection(row, dense, weights=weights) for row in flat])
        return _unflatten(out, sizes)
    if method == "sparse":
        return _unflatten(sparse_projection(flat, C, weights=weights), sizes)
    raise ConfigError(f"unknown census method {method!r}; use 'exact', 'fgmc', 'dense' or 'sparse'")
