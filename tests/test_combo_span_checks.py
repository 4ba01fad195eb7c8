"""The exact membership test of an order in the combos' span (orders that need not be one
combo, ``orders_must_be_combos = false``) against the rank test in exact rationals and seed
004's constraint basis."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamdp.consistency.combos import SEED004_B, SEED004_COMBOS, integer_span_checks


def _rank(rows: list[list[int]]) -> int:
    """Rank in exact rationals (the reference)."""
    m = [[Fraction(x) for x in row] for row in rows]
    rank, cols = 0, len(m[0]) if m else 0
    for col in range(cols):
        pivot = next((i for i in range(rank, len(m)) if m[i][col] != 0), None)
        if pivot is None:
            continue
        m[rank], m[pivot] = m[pivot], m[rank]
        for i in range(len(m)):
            if i != rank and m[i][col] != 0:
                f = m[i][col] / m[rank][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[rank], strict=True)]
        rank += 1
    return rank


def test_seed_004s_menu_gives_its_equation_13() -> None:
    combos = [tuple(int(x) for x in row) for row in SEED004_COMBOS]
    checks = integer_span_checks(combos)
    assert checks == [tuple(int(x) for x in row) for row in SEED004_B]


@given(
    st.integers(2, 5).flatmap(
        lambda items: st.tuples(
            st.lists(
                st.lists(st.integers(0, 3), min_size=items, max_size=items), min_size=1, max_size=4
            ),
            st.lists(
                st.lists(st.integers(0, 4), min_size=items, max_size=items), min_size=1, max_size=8
            ),
        )
    )
)
def test_an_order_passes_exactly_when_it_lies_in_the_span(
    case: tuple[list[list[int]], list[list[int]]],
) -> None:
    combos, orders = case
    checks = integer_span_checks([tuple(c) for c in combos])
    rank = _rank(combos)
    assert len(checks) == len(combos[0]) - rank  # a basis of the complement
    for order in orders:
        in_span = _rank([*combos, order]) == rank
        assert (
            all(sum(n * q for n, q in zip(check, order, strict=True)) == 0 for check in checks)
            is in_span
        )
    # sums of combos always pass
    total = np.sum(np.array(combos), axis=0).tolist()
    assert all(sum(n * q for n, q in zip(check, total, strict=True)) == 0 for check in checks)
