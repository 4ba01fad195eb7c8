"""Rounding exact numbers to floats on the safe side (streamdp.continual.exact_float): the noise
scales and sigmas are floats that must never undercut their exact bounds."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from streamdp.continual.exact_float import float_at_least, float_at_most, float_sqrt_at_least
from streamdp.continual.gaussian_budgets import exact_sigma

LARGEST = Fraction(1.7976931348623157e308)


def _values() -> list[Fraction]:
    rng = random.Random(1)
    fixed = [Fraction(1), Fraction(2), Fraction(1, 3), Fraction(4), Fraction(10) ** -400,
             Fraction(10) ** 400, Fraction(10) ** 700, Fraction(1, 10**700),
             Fraction(5e-324) ** 2, LARGEST ** 2, LARGEST ** 2 * 2]  # fmt: skip
    drawn = [
        Fraction(rng.randint(1, 10**30), rng.randint(1, 10**30))
        * Fraction(2) ** rng.randint(-2200, 2200)
        for _ in range(1500)
    ]
    return fixed + drawn


def test_the_square_root_is_the_smallest_float_whose_square_covers_the_value() -> None:
    for value in _values():
        root = float_sqrt_at_least(value)
        if root == math.inf:
            assert value > LARGEST**2
            continue
        assert Fraction(root) ** 2 >= value, value
        below = math.nextafter(root, 0.0)
        assert root == 0.0 or Fraction(below) ** 2 < value, value
    assert float_sqrt_at_least(Fraction(0)) == 0.0
    with pytest.raises(ValueError, match="negative"):
        float_sqrt_at_least(Fraction(-1))


def test_an_extreme_rho_gives_a_sigma_at_once() -> None:
    """An audit's rho = 1e400 (a finite TOML decimal) hung spec loading: the sigma search
    started from sqrt(0.0) and walked up the subnormals one at a time."""
    tiny = exact_sigma(1, Fraction(10) ** 400)
    assert 0 < tiny < 1e-150
    assert Fraction(1) / (2 * Fraction(tiny) ** 2) <= Fraction(10) ** 400
    assert exact_sigma(1, Fraction(1, 10**700)) == math.inf


def test_rounding_to_a_float_keeps_the_side() -> None:
    for value in _values()[:400]:
        if value > LARGEST:
            continue
        assert Fraction(float_at_most(value)) <= value <= Fraction(float_at_least(value))
