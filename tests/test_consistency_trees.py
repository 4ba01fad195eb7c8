"""Tree sub-solvers against the dense Moore-Penrose reference (seed 004 Theorem 1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdp.errors import ConfigError
from streamdp.papers import (
    Tree,
    boosting,
    complete_tree,
    dense_projection,
    dyadic_tree,
    fgmc_three_level,
    generation_matrix,
    gmc_projection,
    seed003_two_pass,
    tree_projection,
)


def random_tree(rng: np.random.Generator, size: int) -> Tree:
    """Random breadth-first tree: each node of a level gets 0..3 children."""
    parent = [-1]
    frontier = [0]
    while len(parent) < size:
        nxt: list[int] = []
        for p in frontier:
            for _ in range(int(rng.integers(0, 4))):
                if len(parent) < size:
                    nxt.append(len(parent))
                    parent.append(p)
        if not nxt:  # keep growing under the last node of the level
            nxt.append(len(parent))
            parent.append(frontier[-1])
        frontier = nxt
    return Tree(np.array(parent))


def dense_tree(x: np.ndarray, tree: Tree, variances: np.ndarray | None = None) -> np.ndarray:
    C = tree.constraint_matrix().toarray()
    w = None if variances is None else 1.0 / variances
    return np.stack([dense_projection(row, C, weights=w) for row in np.atleast_2d(x)])


def tree_residual(y: np.ndarray, tree: Tree) -> float:
    r = tree.constraint_matrix() @ np.atleast_2d(y).T
    return float(np.max(np.abs(r))) if r.size else 0.0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40), weighted=st.booleans())
def test_exact_two_pass_and_gmc_equal_dense_reference(seed: int, size: int, weighted: bool) -> None:
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, size)
    x = rng.normal(0, 10, size=(3, tree.size))
    var = rng.uniform(0.1, 5.0, tree.size) if weighted else None
    ref = dense_tree(x, tree, var)
    for solver in (tree_projection, gmc_projection):
        y = solver(x, tree, var)
        assert np.max(np.abs(y - ref)) < 1e-9
        assert tree_residual(y, tree) < 1e-9


@pytest.mark.parametrize(("branching", "height"), [(2, 0), (2, 1), (2, 5), (3, 3), (4, 2)])
def test_boosting_and_seed003_are_optimal_on_complete_trees(branching: int, height: int) -> None:
    rng = np.random.default_rng(branching * 10 + height)
    tree = complete_tree(branching, height)
    x = rng.normal(0, 5, size=(2, tree.size))
    ref = dense_tree(x, tree)
    assert np.max(np.abs(boosting(x, branching) - ref)) < 1e-9
    assert np.max(np.abs(seed003_two_pass(x, tree) - ref)) < 1e-9


def test_seed003_is_consistent_but_not_optimal_on_an_unbalanced_tree() -> None:
    # root with a leaf child and a child holding three leaves: subtrees differ
    tree = Tree(np.array([-1, 0, 0, 2, 2, 2]))
    x = np.array([10.0, 1.0, 2.0, 3.0, -1.0, 4.0])
    y = seed003_two_pass(x, tree)
    best = dense_tree(x, tree)[0]
    assert tree_residual(y, tree) < 1e-12
    assert np.sum((y - x) ** 2) > np.sum((best - x) ** 2) + 1e-3


def test_generation_matrix_factorises_the_normal_matrix() -> None:
    rng = np.random.default_rng(7)
    tree = random_tree(rng, 30)
    var = rng.uniform(0.5, 2.0, tree.size)
    C = tree.constraint_matrix().toarray()
    G = generation_matrix(tree, var).toarray()
    assert np.allclose(G.T @ G, C @ np.diag(var) @ C.T, atol=1e-12)


def test_fgmc_closed_form_equals_dense_three_level_tree() -> None:
    rng = np.random.default_rng(3)
    R, k1, k2 = 4, 3, 5
    t, s, m = rng.normal(size=R), rng.normal(size=(R, k1)), rng.normal(size=(R, k1, k2))
    tree = Tree(
        np.concatenate([[-1], np.zeros(k1, dtype=int), np.repeat(np.arange(1, k1 + 1), k2)])
    )
    x = np.concatenate([t[:, None], s, m.reshape(R, -1)], axis=1)
    ref = dense_tree(x, tree)
    t2, s2, m2 = fgmc_three_level(t, s, m)
    got = np.concatenate([t2[:, None], s2, m2.reshape(R, -1)], axis=1)
    assert np.max(np.abs(got - ref)) < 1e-9


def test_dyadic_tree_leaves_are_the_days_in_order() -> None:
    tree = dyadic_tree(11, 2)
    A = tree.aggregation_matrix().toarray()
    assert tree.leaves.size == 11
    assert np.array_equal(A[tree.leaves], np.eye(11))
    assert np.array_equal(A[0], np.ones(11))


def test_bad_trees_and_shapes_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="breadth-first"):
        Tree(np.array([-1, 0, 2]))
    with pytest.raises(ConfigError, match="complete 2-ary"):
        boosting(np.zeros((2, 6)), 2)
    with pytest.raises(ConfigError, match="variances"):
        tree_projection(np.zeros(3), complete_tree(2, 1), np.array([1.0, 0.0, 1.0]))
