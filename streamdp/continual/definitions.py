"""Privacy definitions and their losses as exact values: pure epsilon-DP and rho-zCDP
(DESIGN §2, "Privacy definitions"; issue 27).

A loss is a frozen value holding its parameter as an exact rational
(:class:`PureLoss`: epsilon; :class:`ZcdpLoss`: rho). Losses of one definition compose by
addition (basic composition for pure DP; Bun and Steinke 2016, Lemma 2.3, for zCDP); losses of
two definitions never compose silently: :func:`compose` refuses them, and :func:`pure_as_zcdp`
is the explicit conversion (an epsilon-DP mechanism is ``epsilon^2 / 2``-zCDP, Bun and Steinke
2016, Proposition 1.4).

Every zCDP loss is also reported as (epsilon, delta)-DP for a stated delta with the standard
conversion ``epsilon = rho + 2 sqrt(rho ln(1/delta))`` (Bun and Steinke 2016, Proposition 1.3),
computed in 50-digit decimal arithmetic and rounded UP to a float, so the epsilon stated is never
below the true bound; :func:`rho_for_epsilon` inverts it (rounded DOWN), which is how two
definitions are compared "at matched (epsilon, delta)".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction
from typing import ClassVar, Literal

from streamdp.continual.exact_float import float_at_least, float_at_most
from streamdp.errors import ConfigError
from streamdp.shown_value import shown

Definition = Literal["pure", "zcdp"]
#: The delta zCDP losses are reported at unless a configuration names another: below one over
#: any plausible count of people in a feed (cf. the 2020 US Census's 10^-10).
DEFAULT_DELTA = Fraction(1, 10**10)

_DIGITS = Context(prec=50)


def _positive(value: Fraction | Decimal | int | float | str, name: str) -> Fraction:
    try:
        exact = Fraction(str(value)) if isinstance(value, float) else Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{name} must be a positive number, got {shown(value)}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite positive number, got {shown(value)}")
    if exact <= 0:
        raise ConfigError(f"{name} must be > 0, got {shown(value)}")
    return exact


def _delta(delta: Fraction | float | str) -> Fraction:
    exact = _positive(delta, "delta")
    if exact >= 1:
        raise ConfigError(f"delta must be in (0, 1), got {shown(delta)}")
    return exact


def _decimal(value: Fraction) -> Decimal:
    return _DIGITS.divide(Decimal(value.numerator), Decimal(value.denominator))


@dataclass(frozen=True)
class PureLoss:
    """Pure epsilon-DP (the default; discrete Laplace noise calibrated on L1 sensitivity)."""

    epsilon: Fraction
    definition: ClassVar[Definition] = "pure"

    @classmethod
    def of(cls, epsilon: Fraction | Decimal | int | float | str) -> PureLoss:
        return cls(_positive(epsilon, "epsilon"))

    def __add__(self, other: PureLoss) -> PureLoss:
        if not isinstance(other, PureLoss):
            return NotImplemented
        return PureLoss(self.epsilon + other.epsilon)

    def epsilon_at(self, delta: Fraction | float | str = DEFAULT_DELTA) -> float:
        """epsilon itself (pure DP holds for every delta, including 0), as a float rounded up."""
        _delta(delta)
        return float_at_least(_decimal(self.epsilon))

    def as_dict(self, delta: Fraction | float | str = DEFAULT_DELTA) -> dict[str, object]:
        del delta
        return {"definition": "pure", "epsilon": float(self.epsilon)}

    def __str__(self) -> str:
        return f"epsilon {float(self.epsilon):g} (pure DP)"


@dataclass(frozen=True)
class ZcdpLoss:
    """rho-zero-concentrated DP (discrete Gaussian noise calibrated on L2 sensitivity)."""

    rho: Fraction
    definition: ClassVar[Definition] = "zcdp"

    @classmethod
    def of(cls, rho: Fraction | Decimal | int | float | str) -> ZcdpLoss:
        return cls(_positive(rho, "rho"))

    def __add__(self, other: ZcdpLoss) -> ZcdpLoss:
        if not isinstance(other, ZcdpLoss):
            return NotImplemented
        return ZcdpLoss(self.rho + other.rho)

    def epsilon_at(self, delta: Fraction | float | str = DEFAULT_DELTA) -> float:
        """The (epsilon, delta)-DP this loss implies: ``rho + 2 sqrt(rho ln(1/delta))``,
        rounded up."""
        return zcdp_epsilon(self.rho, delta)

    def as_dict(self, delta: Fraction | float | str = DEFAULT_DELTA) -> dict[str, object]:
        exact = _delta(delta)
        return {
            "definition": "zcdp",
            "rho": float(self.rho),
            "epsilon": self.epsilon_at(exact),
            "delta": float(exact),
        }

    def __str__(self) -> str:
        return f"rho {float(self.rho):g} (zCDP)"


PrivacyLoss = PureLoss | ZcdpLoss


def zcdp_epsilon(rho: Fraction | float | str, delta: Fraction | float | str) -> float:
    """``rho + 2 sqrt(rho ln(1/delta))`` (Bun and Steinke 2016, Proposition 1.3) as a float
    rounded up: rho-zCDP implies (this, delta)-DP. A float argument counts as whichever of its
    binary value and its shortest decimal text gives the larger bound."""
    exact_rho, exact_delta = _positive(rho, "rho"), _delta(delta)
    if isinstance(rho, float):  # the larger of its binary value and its decimal text
        exact_rho = max(exact_rho, Fraction(rho))
    if isinstance(delta, float):  # the smaller: either way the bound only grows
        exact_delta = min(exact_delta, Fraction(delta))
    up = Context(prec=50, rounding=ROUND_CEILING)
    down = Context(prec=50, rounding=ROUND_FLOOR)
    # every step rounds the bound up: rho up, delta down (so ln(1/delta) up), the sum, the
    # product and the margin in the rounding-up context (a step in the default context, which
    # rounds to nearest, could land below the exact value: an audit found the margin below
    # lost there, 1 + 10^-45 being 1 at 28 digits)
    r = up.divide(Decimal(exact_rho.numerator), Decimal(exact_rho.denominator))
    d = down.divide(Decimal(exact_delta.numerator), Decimal(exact_delta.denominator))
    log_inverse = up.ln(up.divide(Decimal(1), d))
    # ln and sqrt are correctly rounded to 50 digits; one unit in the 45th digit covers both
    value = up.add(r, up.multiply(Decimal(2), up.sqrt(up.multiply(r, log_inverse))))
    margin = up.add(Decimal(1), up.scaleb(Decimal(1), -45))
    return float_at_least(up.multiply(value, margin))


def rho_for_epsilon(epsilon: Fraction | float | str, delta: Fraction | float | str) -> float:
    """The largest rho (rounded down) whose :func:`zcdp_epsilon` at ``delta`` is at most
    ``epsilon``: ``(sqrt(epsilon + L) - sqrt(L))^2`` with ``L = ln(1/delta)``."""
    e, d = _decimal(_positive(epsilon, "epsilon")), _decimal(_delta(delta))
    down = Context(prec=50, rounding=ROUND_FLOOR)
    log_inverse = down.ln(down.divide(Decimal(1), d))
    root = down.sqrt(e + log_inverse) - down.sqrt(log_inverse)
    rho = float_at_most(down.multiply(root, root) * (1 - Decimal(10) ** -45))
    while zcdp_epsilon(rho, delta) > float(e) and rho > 0:
        rho = math.nextafter(rho, 0.0)
    return rho


def pure_as_zcdp(loss: PureLoss) -> ZcdpLoss:
    """The explicit conversion: epsilon-DP implies ``epsilon^2 / 2``-zCDP."""
    return ZcdpLoss(loss.epsilon * loss.epsilon / 2)


def compose(losses: Iterable[PrivacyLoss]) -> PrivacyLoss | None:
    """The sum of ``losses`` (None for none); :class:`ConfigError` when they mix definitions
    (convert explicitly with :func:`pure_as_zcdp` first)."""
    total: PrivacyLoss | None = None
    for loss in losses:
        if total is None:
            total = loss
        elif isinstance(total, PureLoss) and isinstance(loss, PureLoss):  # noqa: SIM114 - each branch narrows the types the sum is checked with
            total = total + loss
        elif isinstance(total, ZcdpLoss) and isinstance(loss, ZcdpLoss):
            total = total + loss
        else:
            raise ConfigError(
                f"cannot compose {total} with {loss}: losses of different privacy "
                "definitions do not add; give every stream of a source the same definition "
                "(an epsilon-DP stream is epsilon^2/2-zCDP if you convert it explicitly)"
            )
    return total
