"""Optimal consistent release: noisy counts projected onto their public linear constraints.

Design: DESIGN.md section 4; papers: seed 004 (Theorem 1, the multi-consistency approximation,
the restaurant), seed 000 (census-style attributes, FGMC), seed 003 (two-pass on any tree).

Public API (stable; the release engine depends on the first three):

- :func:`project_onto_combo_span` — every row of (n, items) onto the row space of combos.
- :func:`census_release` — consistent (total, marginals, cells) per region (leading axis).
- :func:`restaurant_release` — per-item trees over days under combo constraints.
- :func:`dense_projection`, :func:`sparse_projection` — any constraint set ``C y = b``.
- :func:`tree_projection`, :func:`boosting`, :func:`gmc_projection`, :func:`seed003_two_pass`,
  :func:`fgmc_three_level` — sub-solvers; :func:`alternating_projections` — seed 004's method;
  :func:`dykstra`, :func:`nonnegative_release` — inequality constraints.
"""

from streamdp.consistency.approximation import ApproximationResult, alternating_projections
from streamdp.consistency.boosting import boosting
from streamdp.consistency.census import (
    CensusApproximation,
    CensusVariances,
    census_approximation,
    census_constraint_matrix,
    census_exact,
    census_release,
    census_residuals,
)
from streamdp.consistency.combos import (
    SEED004_B,
    SEED004_COMBOS,
    ComboSpan,
    project_onto_combo_span,
)
from streamdp.consistency.dykstra import (
    DykstraResult,
    dykstra,
    nonnegative_release,
    project_nondecreasing,
    project_nonnegative,
)
from streamdp.consistency.fgmc import fgmc_three_level
from streamdp.consistency.kronecker.restaurant import (
    restaurant_approximation,
    restaurant_constraint_matrix,
    restaurant_release,
)
from streamdp.consistency.reference import constraint_residual, dense_projection
from streamdp.consistency.sparse import sparse_projection
from streamdp.consistency.trees import (
    Tree,
    complete_tree,
    dyadic_tree,
    generation_matrix,
    gmc_projection,
    seed003_two_pass,
    tree_projection,
)

__all__ = [
    "SEED004_B",
    "SEED004_COMBOS",
    "ApproximationResult",
    "CensusApproximation",
    "CensusVariances",
    "ComboSpan",
    "DykstraResult",
    "Tree",
    "alternating_projections",
    "boosting",
    "census_approximation",
    "census_constraint_matrix",
    "census_exact",
    "census_release",
    "census_residuals",
    "complete_tree",
    "constraint_residual",
    "dense_projection",
    "dyadic_tree",
    "dykstra",
    "fgmc_three_level",
    "generation_matrix",
    "gmc_projection",
    "nonnegative_release",
    "project_nondecreasing",
    "project_nonnegative",
    "project_onto_combo_span",
    "restaurant_approximation",
    "restaurant_constraint_matrix",
    "restaurant_release",
    "seed003_two_pass",
    "sparse_projection",
    "tree_projection",
]
