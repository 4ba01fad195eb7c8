"""Optimal weights against a direct convex solve, the sensitivity constraint, the paper's
closed form, and the O(log N) coefficient function against the vectorised weights.

Reference solver: SLSQP on the convex problem in log-weights u = log(lambda) (a geometric
program, well conditioned), analytic gradients, objective normalised by its value at the
binary-mechanism start; minimax through an epigraph variable. The reference solution is made
exactly feasible by dividing by its largest column sum before its objective is compared.
OpenBLAS is pinned to one thread for this module: its thread pool makes these tiny solves 20-50x
slower on a loaded 2-core machine.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize

from streamdp.continual import fenwick
from streamdp.continual.column_sums import fenwick_column_sums
from streamdp.continual.fda import (
    binary_weights,
    coefficient,
    fda_coefficients,
    fda_level_alphas,
    objective_value,
    optimal_weights,
    path_objectives,
    solve,
)
from streamdp.errors import ConfigError

ALL_N = range(1, 65)


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas() -> Iterator[None]:
    """Best effort: set every loaded OpenBLAS to 1 thread, restore afterwards."""
    restore = []
    maps = Path("/proc/self/maps")
    paths = sorted({ln.split()[-1] for ln in maps.read_text().splitlines() if "openblas" in ln})
    for path in paths if maps.exists() else []:
        lib = ctypes.CDLL(path)
        for suffix in ("", "64_"):
            setter = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
            getter = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                restore.append((setter, getter()))
                setter(1)
    yield
    for setter, threads in restore:
        setter(threads)


def _constraints(A: np.ndarray) -> dict[str, object]:
    """log(column sum) <= 0 for every period, in log-weights; shape (N,)."""

    def fun(u: np.ndarray) -> np.ndarray:
        return -np.log(A @ np.exp(u))

    def jac(u: np.ndarray) -> np.ndarray:
        e = np.exp(u)
        return -(A * e) / (A @ e)[:, None]

    return {"type": "ineq", "fun": fun, "jac": jac}


def slsqp_optimum(N: int, objective: str) -> float:
    """Objective value of the exactly-feasible SLSQP solution."""
    A = fenwick.covering_matrix(N)
    R = fenwick.read_matrix(N)
    u0 = np.log(binary_weights(N))
    if objective == "total":
        r = R.sum(axis=0)  # releases reading each node
        f0 = float(r @ np.exp(-2 * u0))
        res = minimize(
            lambda u: r @ np.exp(-2 * u) / f0,
            u0,
            jac=lambda u: -2 * r * np.exp(-2 * u) / f0,
            method="SLSQP",
            constraints=[_constraints(A)],
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        u = res.x
    else:
        f0 = float((R @ np.exp(-2 * u0)).max())
        base = _constraints(A)

        def epi(z: np.ndarray) -> np.ndarray:
            return z[-1] - R @ np.exp(-2 * z[:-1]) / f0

        def epi_jac(z: np.ndarray) -> np.ndarray:
            J = np.empty((N, N + 1))
            J[:, :-1] = R * (2 * np.exp(-2 * z[:-1]) / f0)
            J[:, -1] = 1.0
            return J

        cols = {
            "type": "ineq",
            "fun": lambda z: base["fun"](z[:-1]),  # type: ignore[operator]
            "jac": lambda z: np.hstack([base["jac"](z[:-1]), np.zeros((N, 1))]),  # type: ignore[operator]
        }
        res = minimize(
            lambda z: z[-1],
            np.concatenate([u0, [1.0]]),
            jac=lambda z: np.eye(N + 1)[-1],
            method="SLSQP",
            constraints=[{"type": "ineq", "fun": epi, "jac": epi_jac}, cols],
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        u = res.x[:-1]
    x = np.exp(u)
    x = x / max(1.0, float((A @ x).max()))
    return objective_value(x, objective)  # type: ignore[arg-type]


@pytest.mark.parametrize("objective", ["total", "minimax"])
def test_weights_equal_the_direct_convex_optimum_for_every_small_horizon(objective: str) -> None:
    for N in ALL_N:
        w = optimal_weights(N, objective)  # type: ignore[arg-type]
        assert w.shape == (N,)
        assert np.all(w > 0)
        assert abs(fenwick_column_sums(w).max() - 1.0) <= 1e-12, N
        ours = objective_value(w, objective)  # type: ignore[arg-type]
        assert ours == pytest.approx(solve(N, objective)[0], rel=1e-12)  # type: ignore[arg-type]
        reference = slsqp_optimum(N, objective)
        assert abs(ours - reference) <= 1e-6 * reference, (N, ours, reference)


def test_the_solver_check_has_power_padding_and_binary_are_suboptimal() -> None:
    # the comparison above would catch a sub-optimal weight set: binary weights lose by far
    for N in (5, 20, 64):
        assert objective_value(binary_weights(N), "total") > 1.01 * slsqp_optimum(N, "total")


def test_sensitivity_constraint_for_large_horizons() -> None:
    for N in (1000, 4095, 65_537, 1_000_000):
        for objective in ("total", "minimax"):
            w = optimal_weights(N, objective)  # type: ignore[arg-type]
            assert abs(fenwick_column_sums(w).max() - 1.0) <= 1e-12


def test_paper_recursion_for_complete_trees() -> None:
    # E_m = E_{m-1} + (E_{m-1}^(1/3) + 2^((m-1)/3))^3, E_1 = 1 (seed 001, DESIGN §3)
    E = 1.0
    for m in range(2, 21):
        E = E + (E ** (1 / 3) + 2 ** ((m - 1) / 3)) ** 3
        assert solve(2**m - 1, "total")[0] == pytest.approx(E, rel=1e-12)
    alphas = fda_level_alphas(12)
    for m in range(1, 13):
        assert solve(2**m - 1, "total")[1] == pytest.approx(alphas[m - 1], rel=1e-12)


def test_coefficient_function_equals_vectorised_weights_up_to_m_20() -> None:
    for m in range(1, 21):
        N = 2**m - 1
        w = optimal_weights(N, "total")
        nodes = np.arange(1, N + 1, dtype=np.int64)
        np.testing.assert_allclose(fda_coefficients(nodes, m), w, rtol=1e-12, atol=0)
        # the scalar O(log N) descent (Algorithm 4) on a sample of nodes
        sample = np.unique(np.r_[1, N, (N + 1) // 2, np.linspace(1, N, 50).astype(int)])
        for k in sample:
            assert coefficient(int(k), N, "total") == pytest.approx(w[k - 1], rel=1e-12)


@pytest.mark.parametrize("objective", ["total", "minimax"])
def test_scalar_coefficient_matches_weights_for_any_horizon(objective: str) -> None:
    for N in (1, 2, 6, 37, 100, 1000):
        w = optimal_weights(N, objective)  # type: ignore[arg-type]
        got = [coefficient(k, N, objective) for k in range(1, N + 1)]  # type: ignore[arg-type]
        np.testing.assert_allclose(got, w, rtol=1e-12)


def test_minimax_equalises_the_worst_releases_and_total_beats_minimax_on_average() -> None:
    N = 4095
    total = optimal_weights(N, "total")
    minimax = optimal_weights(N, "minimax")
    assert objective_value(total, "total") < objective_value(minimax, "total")
    assert objective_value(minimax, "minimax") < objective_value(total, "minimax")
    assert path_objectives(minimax).max() == pytest.approx(solve(N, "minimax")[0], rel=1e-12)


def test_any_horizon_beats_padding() -> None:
    # for N = 2^k the padded tree 2^(k+1) - 1 spends budget on nodes nobody reads
    for N in (64, 100, 1000, 4096):
        padded = 2 ** N.bit_length() - 1
        pad_avg = float(path_objectives(optimal_weights(padded))[:N].mean())
        any_avg = objective_value(optimal_weights(N), "total") / N
        assert any_avg < pad_avg


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="horizon"):
        optimal_weights(0)
    with pytest.raises(ConfigError, match="objective"):
        optimal_weights(5, "average")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="node"):
        coefficient(6, 5)
