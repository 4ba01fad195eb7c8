"""Privacy definitions: exact composition within a definition, refusal across definitions, and
the zCDP -> (epsilon, delta) conversion rounded up (never below the exact bound) with its
inverse rounded down (tight to one float step)."""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

import pytest

from streamdp.continual.definitions import (
    PureLoss,
    ZcdpLoss,
    compose,
    pure_as_zcdp,
    rho_for_epsilon,
    zcdp_epsilon,
)
from streamdp.errors import ConfigError

_REFERENCE = Context(prec=120)


def _exact_epsilon(rho: float, delta: float) -> Decimal:
    """rho + 2 sqrt(rho ln(1/delta)) to 120 digits (an independent reference)."""
    r, d = Decimal(rho), Decimal(str(delta))
    c = _REFERENCE
    return c.add(r, c.multiply(2, c.sqrt(c.multiply(r, c.ln(c.divide(1, d))))))


@pytest.mark.parametrize("rho", [1e-6, 0.015, 0.5, 1.0, 3.7, 250.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-10, 1e-15])
def test_the_conversion_is_the_standard_bound_rounded_up(rho: float, delta: float) -> None:
    exact = _exact_epsilon(rho, delta)
    converted = zcdp_epsilon(rho, delta)
    assert Decimal(converted) >= exact  # never claims less loss than the bound
    assert (Decimal(converted) - exact) / exact < Decimal("1e-15")  # and a float step or two above
    assert converted == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)), rel=1e-14)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 7.25, 40.0])
@pytest.mark.parametrize("delta", [1e-6, 1e-10])
def test_rho_for_epsilon_is_the_largest_rho_whose_bound_fits(epsilon: float, delta: float) -> None:
    rho = rho_for_epsilon(epsilon, delta)
    assert zcdp_epsilon(rho, delta) <= epsilon
    # one float step more and the bound no longer fits (tight to a few ulps)
    assert zcdp_epsilon(rho * (1 + 1e-13), delta) > epsilon


def test_wikimedias_daily_rho_reads_as_about_epsilon_1_19_at_delta_1e_10() -> None:
    assert ZcdpLoss.of("0.015").as_dict(Fraction(1, 10**10)) == {
        "definition": "zcdp",
        "rho": 0.015,
        "epsilon": pytest.approx(1.19039400023, rel=1e-11),
        "delta": 1e-10,
    }


def test_losses_compose_exactly_within_a_definition() -> None:
    assert compose([PureLoss.of("0.1"), PureLoss.of("0.2")]) == PureLoss(Fraction(3, 10))
    assert compose([ZcdpLoss.of("0.1"), ZcdpLoss.of("0.2")]) == ZcdpLoss(Fraction(3, 10))
    assert compose([]) is None


def test_mixed_definitions_are_refused_and_converted_only_explicitly() -> None:
    with pytest.raises(ConfigError, match="different privacy definitions"):
        compose([PureLoss.of(1), ZcdpLoss.of("0.5")])
    with pytest.raises(ConfigError, match="different privacy definitions"):
        compose([ZcdpLoss.of("0.5"), PureLoss.of(1)])
    # epsilon-DP is epsilon^2/2-zCDP (Bun and Steinke 2016, Proposition 1.4)
    assert compose([pure_as_zcdp(PureLoss.of(1)), ZcdpLoss.of("0.5")]) == ZcdpLoss(Fraction(1))


@pytest.mark.parametrize("bad", [0, -1, "x", math.inf, math.nan])
def test_bad_parameters_are_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="rho"):
        ZcdpLoss.of(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="delta"):
        zcdp_epsilon(0.5, 1.5)
