"""Restaurant release (seed 004): every method against the dense reference; combos; approx."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdp.consistency import SEED004_B, SEED004_COMBOS, ComboSpan, project_onto_combo_span
from streamdp.errors import ConfigError
from streamdp.papers import (
    complete_tree,
    dyadic_tree,
    restaurant_approximation,
    restaurant_constraint_matrix,
    restaurant_release,
)


def residual(y: np.ndarray, combos: np.ndarray, tree) -> float:  # type: ignore[no-untyped-def]
    C = restaurant_constraint_matrix(tree, ComboSpan.from_combos(combos))
    return float(np.max(np.abs(C @ y.ravel())))


def test_seed004_eq13_basis_is_the_null_space_of_the_menu() -> None:
    span = ComboSpan.from_combos(SEED004_COMBOS)
    assert np.allclose(SEED004_B @ SEED004_COMBOS.T, 0.0)
    assert span.basis.shape == (5, 3)
    assert span.null.shape == (5, 2)
    # B's rows span exactly the orthogonal complement found by the SVD
    assert np.linalg.matrix_rank(np.vstack([SEED004_B, span.null.T]), tol=1e-9) == 2


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    branching=st.sampled_from([2, 3]),
    height=st.integers(1, 3),
    weighted=st.booleans(),
)
def test_every_method_equals_dense_reference(
    seed: int, branching: int, height: int, weighted: bool
) -> None:
    rng = np.random.default_rng(seed)
    items = int(rng.integers(2, 6))
    combos = rng.integers(0, 3, size=(int(rng.integers(1, items + 1)), items)).astype(float)
    combos[0, 0] += 1.0  # never all-zero
    tree = complete_tree(branching, height)
    X = rng.normal(0, 10, size=(items, tree.size))
    nv = rng.uniform(0.3, 3.0, tree.size) if weighted else None
    iv = rng.uniform(0.3, 3.0, items) if weighted else None
    kw = {"node_variances": nv, "item_variances": iv}
    ref = restaurant_release(X, combos, branching, "dense", **kw)  # type: ignore[arg-type]
    assert residual(ref, combos, tree) < 1e-9
    for method in ("exact", "sparse"):
        y = restaurant_release(X, combos, branching, method, **kw)  # type: ignore[arg-type]
        assert np.max(np.abs(y - ref)) < 1e-9
        assert residual(y, combos, tree) < 1e-9
    tol = 1e-11
    approx = restaurant_approximation(X, combos, branching, tol=tol, **kw)  # type: ignore[arg-type]
    assert approx.converged
    # the stopping rule bounds the last step, not the error; the error is within 1e4 x tol here
    assert np.max(np.abs(approx.values - ref)) < 1e4 * tol
    # consistency deviation (eq. 14) never increases from one sweep to the next
    dev = np.array(approx.deviations)
    assert np.all(np.diff(dev) <= 1e-12 * max(1.0, dev[0]))


def test_seed004_menu_on_a_dyadic_tree_of_any_length() -> None:
    rng = np.random.default_rng(11)
    tree = dyadic_tree(13, 2)
    X = rng.normal(0, 10, size=(5, tree.size))
    exact = restaurant_release(X, SEED004_COMBOS, tree=tree)
    dense = restaurant_release(X, SEED004_COMBOS, tree=tree, method="dense")
    assert np.max(np.abs(exact - dense)) < 1e-9
    # every day's (every node's) item vector is a mix of the three combos
    assert np.max(np.abs(SEED004_B @ exact)) < 1e-9


def test_consistent_truth_is_a_fixed_point_and_noise_is_reduced() -> None:
    rng = np.random.default_rng(5)
    tree = complete_tree(2, 6)
    days = rng.poisson(8.0, size=(tree.leaves.size, 3)) @ SEED004_COMBOS
    truth = (tree.aggregation_matrix() @ days).T
    assert np.max(np.abs(restaurant_release(truth, SEED004_COMBOS) - truth)) < 1e-9
    noisy = truth + rng.laplace(0, 10.0, size=(200, *truth.shape))
    fixed = np.stack([restaurant_release(n, SEED004_COMBOS) for n in noisy])
    assert np.mean((fixed - truth) ** 2) < 0.5 * np.mean((noisy - truth) ** 2)


def test_project_onto_combo_span_handles_rank_deficient_combos() -> None:
    combos = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]])  # rank 1
    v = np.array([[3.0, 1.0, 5.0], [0.0, 0.0, 1.0]])
    got = project_onto_combo_span(v, combos)
    assert np.allclose(got, [[2.0, 2.0, 0.0], [0.0, 0.0, 0.0]], atol=1e-12)
    assert np.allclose(project_onto_combo_span(got, combos), got, atol=1e-12)


def test_bad_restaurant_inputs_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="5 items"):
        restaurant_release(np.zeros((4, 7)), SEED004_COMBOS)
    with pytest.raises(ConfigError, match="complete 2-ary"):
        restaurant_release(np.zeros((5, 6)), SEED004_COMBOS)
    with pytest.raises(ConfigError, match="unknown restaurant method"):
        restaurant_release(np.zeros((5, 7)), SEED004_COMBOS, method="magic")  # type: ignore[arg-type]
