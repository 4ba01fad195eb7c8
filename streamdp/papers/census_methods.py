"""Census-style consistency the papers' way, and the references the exact path is checked on.

Seed 000's method (``census_approximation``: FGMC on each attribute's three-level tree in turn,
per region until the mean absolute change is < tol), the sparse constraint matrix of one region,
and :func:`census_release`, which runs any of ``"exact"`` (the production closed form,
:func:`streamdp.consistency.census.census_exact`), ``"fgmc"``, ``"dense"`` (Moore-Penrose, per
region; small inputs only) or ``"sparse"``. Reproductions and references: nothing on a
production path imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from streamdp.consistency.census import (
    CensusTriple,
    CensusVariances,
    FloatArray,
    census_exact,
    census_residuals,
    validate_census,
)
from streamdp.errors import ConfigError
from streamdp.papers.fgmc import fgmc_three_level
from streamdp.papers.reference import dense_projection
from streamdp.papers.sparse import sparse_projection

CensusMethod = Literal["exact", "fgmc", "dense", "sparse"]


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
    t, s, m = validate_census(total, marginals, cells)
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
    t, s, m = validate_census(total, marginals, cells)
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
