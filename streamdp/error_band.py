"""The 95% error band of a released value: ``value +- (2.12 sd + 1)`` (docs/consuming.md section 4).

A released count or running total carries the standard deviation ``sd`` of its noise: a sum
of independent discrete Laplace variables (pure DP), of discrete Gaussians (zCDP; the lattice
BLT's sd also adds its rounding bias), or a real-valued combination of them (``kary_gls``,
projected releases). Its 95% interval is ``value +- (2.12 sd + 1)``: 2.12 = ln 20 / sqrt 2 is
the 95% point of one Laplace variable in sd units, the heaviest-tailed case of a read path (a
sum of several, or a Gaussian, needs less: 1.96); +1 covers an integer noise's lattice
(``tests/test_deploy_error_bounds.py`` checks the coverage exactly). The band is conservative
for every mechanism; the demo board, the feed page and the Grafana dashboard all draw it.
"""

from __future__ import annotations

from collections.abc import Mapping

#: 95% half-width in standard deviations (docs/consuming.md section 4).
LAPLACE_95_SD = 2.12


def half_width95(sd: float) -> float:
    """Half-width of the 95% interval of a released value with noise standard deviation ``sd``
    (same unit as the value, counts): ``2.12 sd + 1`` (docs/consuming.md section 4)."""
    return LAPLACE_95_SD * sd + 1.0


def half_widths95(stds: Mapping[str, float] | None) -> dict[str, float] | None:
    """:func:`half_width95` of every counter's standard deviation in ``stds`` (None stays None:
    records written before they carried standard deviations)."""
    return None if stds is None else {name: half_width95(sd) for name, sd in stds.items()}
