"""Combo constraints: the item vector of every period (and node) lies in span(combos).

A shop that sells only combos (seed 004's restaurant: cola, burger, wings, fries, nuggets sold
as three menus) has, each day, item counts ``v = combos^T q`` for some combo counts ``q``:
``v`` lies in the row space of ``combos`` (shape (combos, items)). As equalities: ``N^T v = 0``
with ``N`` a basis of the null space of ``combos`` — seed 004 eq. 13 is one such basis (two
rows) for its three combos. Both bases come from one SVD, so rank-deficient or redundant combo
lists are handled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]

# Seed 004's menu over (cola, burger, wings, fries, nuggets):
# 1) 2 cola + burger + wings + nuggets, 2) 2 burgers + 2 wings + fries,
# 3) cola + burger + fries + nuggets.
SEED004_COMBOS: FloatArray = np.array(
    [[2, 1, 1, 0, 1], [0, 2, 2, 1, 0], [1, 1, 0, 1, 1]], dtype=np.float64
)
# Seed 004 eq. 13: a basis of the constraints B v = 0 for that menu.
SEED004_B: FloatArray = np.array([[1, -5, 3, 4, 0], [-1, -1, 1, 0, 2]], dtype=np.float64)


@dataclass(frozen=True)
class ComboSpan:
    """Orthonormal bases of span(combos) and of its orthogonal complement.

    Attributes:
        basis: shape (items, rank), orthonormal columns spanning the row space of ``combos``.
        null: shape (items, items - rank), orthonormal columns with ``null^T v = 0`` exactly on
            the span (the rows of ``null^T`` are an orthonormal version of seed 004's ``B``).
    """

    basis: FloatArray
    null: FloatArray

    @classmethod
    def from_combos(cls, combos: npt.ArrayLike, rtol: float = 1e-10) -> ComboSpan:
        """Build the bases from ``combos`` (shape (combos, items)) by SVD, rank by ``rtol``."""
        c = np.asarray(combos, dtype=np.float64)
        if c.ndim != 2 or c.shape[1] == 0 or c.shape[0] == 0:
            raise ConfigError(f"combos must have shape (combos, items), got {c.shape}")
        if not np.all(np.isfinite(c)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(c))[0])
            raise ConfigError(
                "combos must be finite numbers (units of each item per combo), got "
                f"{c[bad]} at (combo, item) {bad}"
            )
        _, s, vt = np.linalg.svd(c, full_matrices=True)
        rank = int(np.sum(s > rtol * (s[0] if s.size else 0.0))) if s.size and s[0] > 0 else 0
        return cls(basis=vt[:rank].T.copy(), null=vt[rank:].T.copy())

    @property
    def items(self) -> int:
        return int(self.basis.shape[0])

    @property
    def projector(self) -> FloatArray:
        """``P = Q Q^T`` (items x items), the orthogonal projector onto the span."""
        p: FloatArray = self.basis @ self.basis.T
        return p

    def weighted_projector(self, item_variances: npt.ArrayLike | None) -> FloatArray:
        """Projector onto the span in the inner product ``diag(1 / item_variances)``.

        Returned as ``P`` (items x items) acting on row vectors: ``v_hat = v @ P``.
        """
        if item_variances is None:
            return self.projector
        s2 = np.asarray(item_variances, dtype=np.float64)
        if s2.shape != (self.items,) or np.any(s2 <= 0) or not np.all(np.isfinite(s2)):
            raise ConfigError(f"item variances must be {self.items} finite values > 0")
        Q = self.basis
        w = 1.0 / s2
        gram = Q.T @ (w[:, None] * Q)
        # column form: P_col = Q gram^{-1} Q^T W; row-vector form is its transpose
        p_col = Q @ np.linalg.solve(gram, Q.T * w[None, :])
        out: FloatArray = p_col.T
        return out

    def project(
        self, values: npt.ArrayLike, item_variances: npt.ArrayLike | None = None
    ) -> FloatArray:
        """Project every row of ``values`` (shape (..., items)) onto span(combos)."""
        v = np.asarray(values, dtype=np.float64)
        if v.ndim < 1 or v.shape[-1] != self.items:
            raise ConfigError(
                f"values have shape {v.shape}; the last axis must be the {self.items} items"
            )
        if item_variances is None:
            out: FloatArray = (v @ self.basis) @ self.basis.T
            return out
        result: FloatArray = v @ self.weighted_projector(item_variances)
        return result

    def residual(self, values: npt.ArrayLike) -> FloatArray:
        """``null^T v`` for every row: zero exactly when the row lies in the span."""
        r: FloatArray = np.asarray(values, dtype=np.float64) @ self.null
        return r


def project_onto_combo_span(values: npt.ArrayLike, combos: npt.ArrayLike) -> FloatArray:
    """Orthogonal projection of every row of ``values`` onto the row space of ``combos``.

    Used by the release engine per Fenwick node: with node noise variances shared by all
    counters, the weighted least-squares consistent release separates into this unweighted
    projection of each node's item vector (proved in tests/test_consistency_fenwick.py).

    Args:
        values: shape (n, items) (any leading shape works).
        combos: shape (combos, items), units of each item per combo; may be rank-deficient.

    Returns:
        Shape like ``values``; every row lies in span(combos).
    """
    return ComboSpan.from_combos(combos).project(values)


def integer_span_checks(
    combos: list[tuple[int, ...]] | tuple[tuple[int, ...], ...],
) -> list[tuple[int, ...]]:
    """Integer vectors ``n`` (one per dimension of the complement) with ``n . v == 0`` for every
    ``v`` in span(combos) and for no other integer ``v``: an exact membership test for an
    order's item vector (no float tolerance). From the null space of ``combos`` (shape
    (combos, items)) by Gaussian elimination in rationals, each basis vector scaled to
    integers; empty when the combos span every item."""
    from fractions import Fraction
    from math import lcm

    rows = [[Fraction(q) for q in combo] for combo in combos]
    items = len(rows[0]) if rows else 0
    pivots: list[int] = []
    r = 0
    for col in range(items):  # reduced row echelon form of the combos
        pivot = next((i for i in range(r, len(rows)) if rows[i][col] != 0), None)
        if pivot is None:
            continue
        rows[r], rows[pivot] = rows[pivot], rows[r]
        lead = rows[r][col]
        rows[r] = [x / lead for x in rows[r]]
        for i in range(len(rows)):
            if i != r and rows[i][col] != 0:
                factor = rows[i][col]
                rows[i] = [a - factor * b for a, b in zip(rows[i], rows[r], strict=True)]
        pivots.append(col)
        r += 1
    checks: list[tuple[int, ...]] = []
    for free in (c for c in range(items) if c not in pivots):
        vector = [Fraction(0)] * items
        vector[free] = Fraction(1)
        for i, col in enumerate(pivots):
            vector[col] = -rows[i][free]
        scale = lcm(*(x.denominator for x in vector))
        checks.append(tuple(int(x * scale) for x in vector))
    return checks
