"""The fact the release engine relies on: per-node projection = dense weighted least squares.

A Fenwick tree releases node sums c_i = sum of period counts a over a range, with a noise
variance depending only on the node (the same for every counter). The public constraints hold
per period (each period's item vector is a mix of combos; each period's census counters add
up). Because the Fenwick strategy is invertible, the weighted least-squares estimate of the
nodes is the per-node (unweighted) projection onto the constraint subspace. Here the full
(period x counter) problem is built and solved densely, with unequal node variances.
"""

from __future__ import annotations

import numpy as np

from streamdp.consistency import SEED004_COMBOS, ComboSpan, project_onto_combo_span
from streamdp.papers import census_constraint_matrix, census_release


def fenwick_matrix(N: int) -> np.ndarray:
    """F[i-1, t-1] = 1 when Fenwick node i covers period t (i - lowbit(i) < t <= i)."""
    F = np.zeros((N, N))
    for i in range(1, N + 1):
        F[i - 1, i - (i & -i) : i] = 1.0
    return F


def dense_gls(
    F: np.ndarray, node_var: np.ndarray, noisy: np.ndarray, K_period: np.ndarray
) -> np.ndarray:
    """argmin_a sum_i |F_i a - noisy_i|^2 / var_i  s.t. K_period a_t = 0 for every period t.

    Variables a: (periods, counters) flattened period-major. Returns the fitted nodes F a.
    """
    N, counters = noisy.shape
    A = np.kron(F, np.eye(counters))
    W = np.kron(np.diag(1.0 / node_var), np.eye(counters))
    K = np.kron(np.eye(N), K_period)
    kkt = np.block([[A.T @ W @ A, K.T], [K, np.zeros((K.shape[0], K.shape[0]))]])
    rhs = np.concatenate([A.T @ W @ noisy.ravel(), np.zeros(K.shape[0])])
    sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    return (A @ sol[: N * counters]).reshape(N, counters)


def test_fenwick_combo_release_separates_per_node() -> None:
    rng = np.random.default_rng(2024)
    N = 7
    F = fenwick_matrix(N)
    node_var = rng.uniform(0.5, 20.0, N)  # unequal, as FDA weights give
    noisy = rng.normal(0, 10, size=(N, 5))
    span = ComboSpan.from_combos(SEED004_COMBOS)
    dense = dense_gls(F, node_var, noisy, span.null.T)
    per_node = project_onto_combo_span(noisy, SEED004_COMBOS)
    assert np.max(np.abs(dense - per_node)) < 1e-9
    # the unequal weights matter for a non-invertible design: dropping a node breaks separation
    assert np.linalg.matrix_rank(F) == N


def test_fenwick_census_release_separates_per_node() -> None:
    rng = np.random.default_rng(7)
    N = 6
    sizes = [2, 3]
    F = fenwick_matrix(N)
    node_var = rng.uniform(0.5, 20.0, N)
    C = census_constraint_matrix(sizes).toarray()
    counters = C.shape[1]
    noisy = rng.normal(0, 10, size=(N, counters))
    dense = dense_gls(F, node_var, noisy, C)
    t, s1, s2, m = noisy[:, 0], noisy[:, 1:3], noisy[:, 3:6], noisy[:, 6:].reshape(N, 2, 3)
    rt, (r1, r2), rm = census_release(t, [s1, s2], m)  # node axis = region axis
    per_node = np.concatenate([rt[:, None], r1, r2, rm.reshape(N, -1)], axis=1)
    assert np.max(np.abs(dense - per_node)) < 1e-9
