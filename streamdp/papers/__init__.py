"""The source papers' consistency methods, reproduced, and the reference solvers every faster
path is checked against (DESIGN §4; seeds 004, 000, 003). Nothing on a production path imports
this package: the tests and ``benchmarks/consistency_*.py`` do.

- :func:`dense_projection` (Moore-Penrose, seed 004 Theorem 1), :func:`sparse_projection` —
  any constraint set ``C y = b``; :func:`constraint_residual`.
- :func:`alternating_projections` — seed 004's multi-consistency approximation.
- :func:`tree_projection`, :func:`boosting`, :func:`gmc_projection`, :func:`seed003_two_pass`,
  :func:`fgmc_three_level` — tree sub-solvers.
- :func:`restaurant_release` — per-item trees over days under combo constraints (seed 004).
- :func:`census_release` (any method), :func:`census_approximation` (seed 000's FGMC sweeps),
  :func:`census_constraint_matrix`.
- :func:`dykstra`, :func:`nonnegative_release` — inequality constraints.
"""

from streamdp.papers.approximation import ApproximationResult, alternating_projections
from streamdp.papers.boosting import boosting
from streamdp.papers.census_methods import (
    CensusApproximation,
    census_approximation,
    census_constraint_matrix,
    census_release,
)
from streamdp.papers.dykstra import (
    DykstraResult,
    dykstra,
    nonnegative_release,
    project_nondecreasing,
    project_nonnegative,
)
from streamdp.papers.fgmc import fgmc_three_level
from streamdp.papers.gmc import generation_matrix, gmc_projection
from streamdp.papers.reference import constraint_residual, dense_projection
from streamdp.papers.restaurant import (
    restaurant_approximation,
    restaurant_constraint_matrix,
    restaurant_release,
)
from streamdp.papers.sparse import sparse_projection
from streamdp.papers.tree import Tree, complete_tree, dyadic_tree
from streamdp.papers.tree_passes import seed003_two_pass, tree_projection

__all__ = [
    "ApproximationResult",
    "CensusApproximation",
    "DykstraResult",
    "Tree",
    "alternating_projections",
    "boosting",
    "census_approximation",
    "census_constraint_matrix",
    "census_release",
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
    "restaurant_approximation",
    "restaurant_constraint_matrix",
    "restaurant_release",
    "seed003_two_pass",
    "sparse_projection",
    "tree_projection",
]
