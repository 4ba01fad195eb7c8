"""The 95% error band of a released value: ``value +- (2.12 sd + 1)`` (docs/consuming.md section 4).

A released count or running total carries the standard deviation ``sd`` of its noise (a sum of
independent discrete Laplace variables). Its 95% interval is ``value +- (2.12 sd + 1)``:
2.12 = ln 20 / sqrt 2 is the 95% point of one Laplace variable in sd units, the worst case of a
read path; +1 because the noise is an integer (``tests/test_deploy_error_bounds.py`` checks the
coverage exactly). The demo board, the feed page and the Grafana dashboard all draw this band.
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
