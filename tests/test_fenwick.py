"""Fenwick primitives against brute-force definitions."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.continual import fenwick

N = 70


def test_read_paths_partition_the_prefix() -> None:
    for t in range(1, N + 1):
        covered = sorted(
            p for i in fenwick.read_path(t) for p in range(fenwick.interval(i)[0], i + 1)
        )
        assert covered == list(range(1, t + 1))
        assert len(fenwick.read_path(t)) == bin(t).count("1")


def test_update_chain_is_exactly_the_covering_nodes() -> None:
    for p in range(1, N + 1):
        brute = [i for i in range(1, N + 1) if fenwick.interval(i)[0] <= p <= i]
        assert fenwick.update_chain(p, N) == brute
        assert len(brute) <= N.bit_length()


def test_finalisation_rule_children_sum_to_the_node() -> None:
    a = np.random.default_rng(0).integers(0, 100, size=N)
    c = {i: int(a[fenwick.interval(i)[0] - 1 : i].sum()) for i in range(1, N + 1)}
    for t in range(1, N + 1):
        kids = fenwick.children(t)
        assert all(fenwick.parent(j) == t for j in kids)
        assert sorted(kids) == [j for j in range(1, t) if j + fenwick.lowbit(j) == t]
        assert c[t] == a[t - 1] + sum(c[j] for j in kids)


def test_prefix_path_sums_matches_the_read_matrix() -> None:
    values = np.random.default_rng(1).random(N)
    np.testing.assert_allclose(
        fenwick.prefix_path_sums(values), fenwick.read_matrix(N) @ values, rtol=1e-13
    )


def test_lowbit() -> None:
    assert [fenwick.lowbit(i) for i in range(1, 9)] == [1, 2, 1, 4, 1, 2, 1, 8]
    np.testing.assert_array_equal(fenwick.lowbits(8), [fenwick.lowbit(i) for i in range(1, 9)])


def test_bad_period_is_refused() -> None:
    with pytest.raises(Exception, match=r"1\.\.5"):
        fenwick.update_chain(6, 5)
