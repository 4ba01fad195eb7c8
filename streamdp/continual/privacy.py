"""The privacy parameters of a counter: epsilon held exactly, the sensitivity Delta, and the
range of noise scales the sampler is safe in (DESIGN §2, §3).

Every counter kind checks its parameters here (:func:`check_privacy`) and states its loss
against epsilon as written (:func:`exact_epsilon`); the noise-scale limits bound every node's
or level's scale (:mod:`streamdp.continual.node_budgets`, :mod:`streamdp.continual.factored_noise`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from streamdp.errors import ConfigError
from streamdp.shown_value import shown

#: Largest sensitivity Delta: an integer that float arithmetic holds exactly (and the noise scale
#: limit leaves room for).
MAX_SENSITIVITY = 2**40

Epsilon = float | int | Decimal | Fraction


def exact_epsilon(epsilon: Epsilon) -> Fraction:
    """``epsilon`` as an exact rational; a float stands for the smaller of its exact binary value
    and the shortest decimal that prints it (``0.1`` -> ``1/10``: the spec's decimal text), so the
    loss guaranteed against it is never above the epsilon the operator wrote."""
    if isinstance(epsilon, float):
        if not math.isfinite(epsilon):
            raise ConfigError(f"epsilon must be a finite number > 0, got {shown(epsilon)}")
        return min(Fraction(epsilon), Fraction(repr(epsilon)))
    if isinstance(epsilon, Decimal) and not epsilon.is_finite():
        raise ConfigError(f"epsilon must be a finite number > 0, got {shown(epsilon)}")
    return Fraction(epsilon)


def check_privacy(epsilon: Epsilon, sensitivity: float) -> tuple[float, float]:
    """Validate ``epsilon > 0`` and ``sensitivity > 0`` (finite); return them as floats."""
    eps, delta = float(epsilon), float(sensitivity)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ConfigError(f"epsilon must be a finite number > 0, got {shown(epsilon)}")
    if not math.isfinite(delta) or delta <= 0.0:
        raise ConfigError(
            f"sensitivity (Delta, the L1 contribution bound of one event) must be a finite "
            f"number > 0, got {shown(sensitivity)}"
        )
    if delta > MAX_SENSITIVITY or Fraction(delta) != Fraction(sensitivity):
        raise ConfigError(
            f"sensitivity (Delta) must be at most 2^40 = {MAX_SENSITIVITY} and exact in float "
            f"arithmetic, got {shown(sensitivity)}"
        )
    return eps, delta
