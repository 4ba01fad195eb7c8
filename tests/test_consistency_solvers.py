"""General sparse solver and Dykstra's inequality-constrained release."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import nnls

from streamdp.consistency import SEED004_COMBOS
from streamdp.errors import ConfigError
from streamdp.papers import (
    complete_tree,
    dense_projection,
    dykstra,
    nonnegative_release,
    project_nondecreasing,
    project_nonnegative,
    restaurant_release,
    sparse_projection,
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 25), m=st.integers(1, 20))
def test_sparse_solver_equals_dense_with_redundant_rows_and_weights(
    seed: int, n: int, m: int
) -> None:
    rng = np.random.default_rng(seed)
    C = rng.integers(-2, 3, size=(m, n)).astype(float)
    C = np.vstack([C, C[:1] + C[-1:]])  # a redundant row
    y0 = rng.normal(size=n)
    b = C @ y0  # consistent right-hand side
    x = rng.normal(0, 5, size=(2, n))
    w = rng.uniform(0.2, 5.0, n)
    ref = np.stack([dense_projection(row, C, b, w) for row in x])
    import scipy.sparse as sp

    got = sparse_projection(x, sp.csr_matrix(C), b, w)
    assert np.max(np.abs(got - ref)) < 1e-9
    assert np.max(np.abs(got @ C.T - b)) < 1e-9


def test_sparse_solver_rejects_inconsistent_constraints() -> None:
    import scipy.sparse as sp

    C = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ConfigError, match="no solution"):
        sparse_projection(np.zeros(2), C, np.array([1.0, 2.0]))


def test_dykstra_nonnegative_release_matches_a_convex_solver() -> None:
    rng = np.random.default_rng(3)
    tree = complete_tree(2, 2)
    x = rng.normal(1.0, 6.0, size=(5, tree.size))

    def project(v: np.ndarray) -> np.ndarray:
        return restaurant_release(v, SEED004_COMBOS)

    got = nonnegative_release(x, project, tol=1e-12)
    assert got.converged
    # optimality certificate (KKT): x - y = n - mu with n orthogonal to the consistent
    # subspace L and mu >= 0 supported where y = 0; find mu by non-negative least squares
    basis = np.linalg.svd(
        np.stack([project(e.reshape(x.shape)).ravel() for e in np.eye(x.size)]), hermitian=True
    )
    U = basis[0][:, basis[1] > 0.5]  # orthonormal basis of L
    y = got.values.ravel()
    active = np.flatnonzero(y < 1e-7)
    assert active.size > 0  # the constraint binds in this instance
    _, misfit = nnls(-U.T[:, active], U.T @ (x.ravel() - y))
    assert misfit < 1e-6
    assert np.max(np.abs(U @ (U.T @ y) - y)) < 1e-8
    assert got.values.min() > -1e-9
    assert np.max(np.abs(project(got.values) - got.values)) < 1e-8


def test_isotonic_projection_is_optimal_and_monotone() -> None:
    rng = np.random.default_rng(8)
    x = np.cumsum(rng.normal(0.2, 3.0, size=(3, 40)), axis=1)
    y = project_nondecreasing(x)
    assert np.all(np.diff(y, axis=1) >= -1e-12)
    # optimality (KKT of isotonic regression): inside each constant block the residual sums to 0
    # and every prefix sum of (x - y) within a block is >= 0
    for xr, yr in zip(x, y, strict=True):
        blocks = np.split(np.arange(40), np.flatnonzero(np.diff(yr) > 1e-12) + 1)
        for blk in blocks:
            d = xr[blk] - yr[blk]
            assert abs(d.sum()) < 1e-9
            assert np.all(np.cumsum(d)[:-1] >= -1e-9)


def test_dykstra_validates_its_arguments() -> None:
    with pytest.raises(ConfigError):
        dykstra(np.zeros(3), [], tol=1e-6)
    assert np.array_equal(project_nonnegative(np.array([-1.0, 2.0])), [0.0, 2.0])
