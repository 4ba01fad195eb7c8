"""Optimal consistent release on the production path: noisy values projected onto their public
linear constraints (DESIGN §4; seeds 004 and 000).

Only what the engine's revisions run lives here: the combo span projection (seed 004's item
constraint) and the exact census projection (the ANOVA closed form). The papers' own methods
and the references these are checked against are in :mod:`streamdp.papers`.

- :func:`project_onto_combo_span` — every row of (n, items) onto the row space of combos.
- :func:`census_exact` — consistent (total, marginals, cells) per region (leading axis).
- :func:`census_residuals` — every census constraint's residual (zero when consistent).
"""

from streamdp.consistency.census import (
    CensusVariances,
    census_exact,
    census_residuals,
)
from streamdp.consistency.combos import (
    SEED004_B,
    SEED004_COMBOS,
    ComboSpan,
    project_onto_combo_span,
)

__all__ = [
    "SEED004_B",
    "SEED004_COMBOS",
    "CensusVariances",
    "ComboSpan",
    "census_exact",
    "census_residuals",
    "project_onto_combo_span",
]
