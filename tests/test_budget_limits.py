"""Exact budgets and sane budgets (issue 11 item 4, issue 17).

- Every node's loss ``Delta / scale_i`` is at most ``epsilon * lambda_i`` and every column (the
  nodes covering one period) adds up to at most ``epsilon``, checked in exact rational arithmetic
  against the epsilon the operator wrote (``0.1`` means 1/10), for nasty floats and many
  horizons; OpenDP's own privacy map of the measurement the sampler runs agrees.
- An epsilon or Delta whose noise scale leaves ``[2^-40, 2^40]`` is refused by the spec, the
  counter and the planner, with the limit in the message.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from importlib import resources
from typing import Any

import numpy as np
import pytest

from streamdp.continual import ContinualCounter, build_strategy
from streamdp.continual.column_sums import fenwick_column_sums
from streamdp.continual.fenwick import update_chain
from streamdp.continual.node_budgets import node_budgets, node_scales
from streamdp.continual.privacy import exact_epsilon
from streamdp.continual.strategy import Strategy
from streamdp.engine import parse_spec
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler, OpenDPDiscreteLaplace
from streamdp.noise.opendp_sampler import opendp_privacy_loss
from streamdp.noise.sampler import MAX_NOISE_SCALE
from streamdp.planner.accuracy import plan

EPSILONS: list[float | Decimal] = [0.1, 1 / 3, 1e-3, 0.7, 2.0, 0.3, Decimal("0.45")]
DELTAS = [1, 5, 7]
SHAPES = [
    ("fda", "total", 1),
    ("fda", "total", 7),
    ("fda", "total", 45),
    ("fda", "minimax", 100),
    ("fda", "total", 1000),
    ("binary", "total", 13),
    ("binary", "total", 1000),
    ("naive", "total", 20),
]


def intended(epsilon: float | Decimal) -> Fraction:
    """The epsilon the operator meant: 0.1 is 1/10, 1/3 is one third."""
    if isinstance(epsilon, Decimal):
        return Fraction(epsilon)
    if epsilon == 1 / 3:
        return Fraction(1, 3)
    return Fraction(repr(epsilon))


def columns(strategy: Strategy) -> list[list[int]]:
    return [strategy.covering_nodes(p) for p in range(1, strategy.horizon + 1)]


@pytest.mark.parametrize(("mechanism", "objective", "horizon"), SHAPES)
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_node_and_every_column_is_within_epsilon_exactly(
    mechanism: str, objective: str, horizon: int, delta: int, epsilon: float | Decimal
) -> None:
    strategy = build_strategy(mechanism, objective, horizon)  # type: ignore[arg-type]
    scales = node_scales(strategy, epsilon, delta)
    eps = intended(epsilon)
    loss = [Fraction(delta) / Fraction(float(s)) for s in scales]
    for i, weight in enumerate(strategy.weights):
        assert loss[i] <= eps * Fraction(float(weight)), f"node {i + 1}"
    for p, nodes in enumerate(columns(strategy), start=1):
        assert sum(loss[i - 1] for i in nodes) <= eps, f"period {p}"
    # rounded up by a hair only: utility is that of the float formula
    np.testing.assert_allclose(scales, delta / (float(epsilon) * strategy.weights), rtol=1e-12)


def test_the_float_formula_overspends_so_the_exactness_test_can_fail() -> None:
    """What main computed (Delta / (epsilon * lambda_i) in float) loses more than epsilon on
    some period of the grid above: the test above would fail on it."""
    over = 0
    for mechanism, objective, horizon in SHAPES:
        strategy = build_strategy(mechanism, objective, horizon)  # type: ignore[arg-type]
        for epsilon in EPSILONS:
            for delta in DELTAS:
                scales = delta / (float(epsilon) * strategy.weights)
                loss = [Fraction(delta) / Fraction(float(s)) for s in scales]
                eps = intended(epsilon)
                over += any(sum(loss[i - 1] for i in nodes) > eps for nodes in columns(strategy))
    assert over > 0


@pytest.mark.parametrize(("mechanism", "objective", "horizon"), SHAPES[:6])
@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 5), (1 / 3, 7), (1e-3, 5), (0.7, 1)])
def test_opendp_privacy_map_agrees_node_by_node_and_per_column(
    mechanism: str, objective: str, horizon: int, epsilon: float, delta: int
) -> None:
    strategy = build_strategy(mechanism, objective, horizon)  # type: ignore[arg-type]
    scales = node_scales(strategy, epsilon, delta)
    eps = intended(epsilon)
    mapped = [Fraction(opendp_privacy_loss(float(s), delta)) for s in scales]
    for i, weight in enumerate(strategy.weights):
        assert mapped[i] <= eps * Fraction(float(weight)), f"node {i + 1}"
    for p, nodes in enumerate(columns(strategy), start=1):
        assert sum(mapped[i - 1] for i in nodes) <= eps, f"period {p}"


def test_losses_are_floats_between_the_exact_loss_and_the_share() -> None:
    strategy = build_strategy("fda", "total", 200)
    budgets = node_budgets(strategy, 0.1, 5)
    eps = Fraction(1, 10)
    for scale, loss, weight in zip(budgets.scales, budgets.losses, strategy.weights, strict=True):
        assert Fraction(5) / Fraction(float(scale)) <= Fraction(float(loss))
        assert Fraction(float(loss)) <= eps * Fraction(float(weight))
    worst = max(fenwick_column_sums(budgets.losses))
    assert worst <= 0.1


def test_a_float_epsilon_stands_for_the_smaller_of_its_binary_and_decimal_values() -> None:
    assert exact_epsilon(0.1) == Fraction(1, 10)  # float 0.1 is slightly above 1/10
    assert exact_epsilon(0.3) == Fraction(0.3)  # float 0.3 is slightly below 3/10
    assert exact_epsilon(Decimal("0.45")) == Fraction(9, 20)


def test_the_counter_draws_at_the_exact_scales() -> None:
    strategy = build_strategy("fda", "total", 45)

    class Recording(InsecureSeededSampler):
        scales: list[float] = []  # noqa: RUF012

        def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:  # type: ignore[type-arg]
            self.scales.append(scale)
            return super().discrete_laplace(scale, size, label=label)

    counter = ContinualCounter(strategy, 0.1, 5.0, 2, Recording(1))
    for _ in range(45):
        counter.close_period(np.zeros(2, dtype=np.int64))
    eps = Fraction(1, 10)
    for p in range(1, 46):
        nodes = update_chain(p, 45)
        assert sum(Fraction(5) / Fraction(Recording.scales[i - 1]) for i in nodes) <= eps


# ---------------------------------------------------------------- limits (issue 17)

RESTAURANT = resources.files("streamdp").joinpath("examples", "restaurant.toml").read_text("utf-8")


def restaurant(epsilon: str = "1.0", sensitivity: str = "5") -> str:
    text = RESTAURANT.replace("epsilon = 1.0", f"epsilon = {epsilon}", 1)
    assert text != RESTAURANT or epsilon == "1.0"
    return text.replace("sensitivity = 5", f"sensitivity = {sensitivity}", 1)


@pytest.mark.parametrize("epsilon", ["1e-19", "1e-300", "1e-11"])
def test_the_spec_refuses_an_epsilon_whose_noise_would_saturate_the_sampler(
    epsilon: str,
) -> None:
    with pytest.raises(ConfigError, match=r"epsilon.*above the limit 2\^40 = 1099511627776"):
        parse_spec(restaurant(epsilon=epsilon))


def test_the_spec_accepts_small_epsilons_within_the_limit() -> None:
    spec = parse_spec(restaurant(epsilon="1e-9"))
    assert next(iter(spec.streams.values())).epsilon == Decimal("1e-9")


def test_the_spec_refuses_an_epsilon_so_large_the_noise_vanishes() -> None:
    text = restaurant(epsilon="1e30").replace("epsilon_cap = 1.0", "epsilon_cap = 1e31")
    with pytest.raises(ConfigError, match=r"below the limit 2\^-40"):
        parse_spec(text)


def test_the_spec_refuses_a_huge_sensitivity() -> None:
    with pytest.raises(ConfigError, match=r"(2\^40|limit)"):
        parse_spec(restaurant(sensitivity=str(2**41)))


def test_the_spec_refuses_an_epsilon_it_cannot_read_exactly() -> None:
    with pytest.raises(ConfigError, match=r"at most 15 are read exactly.*0\.123456789012345"):
        parse_spec(restaurant(epsilon="0.1234567890123456789"))


def test_the_planner_refuses_the_same_budgets() -> None:
    with pytest.raises(ConfigError, match=r"above the limit 2\^40"):
        plan("fda", "total", 100, 1e-19, 5)
    with pytest.raises(ConfigError, match=r"above the limit 2\^40"):
        plan("naive", "total", 10, 1e-300, 5)
    assert plan("fda", "total", 100, 1e-9, 5).mean_variance > 0


def test_counter_refuses_and_at_the_limit_reports_finite_json_safe_deviations() -> None:
    strategy = build_strategy("naive", "total", 3)
    with pytest.raises(ConfigError, match="2\\^40"):
        ContinualCounter(strategy, 1e-300, 5.0, 1, InsecureSeededSampler(0))
    edge = 5.0 / (MAX_NOISE_SCALE * 0.999)  # the smallest epsilon of about the limit
    counter = ContinualCounter(strategy, edge, 5.0, 1, InsecureSeededSampler(0))
    release = counter.close_period(np.array([7777]))
    assert math.isfinite(release.count_std)
    assert math.isfinite(release.total_std)
    json.loads(json.dumps({"sd": release.total_std}, allow_nan=False))


def test_at_the_scale_limit_opendp_noise_stays_far_from_the_int64_edges() -> None:
    """Why the limit: at scale 5e19 (epsilon 1e-19, Delta 5) OpenDP's discrete Laplace
    saturates at the int64 limits; at 2^40 its draws stay below 2^56 in magnitude (the tail
    bound gives probability below 2 exp(-2^16) for one draw to reach it)."""
    from streamdp.noise.opendp_sampler import _draw, _measurement

    saturated = _draw(_measurement(5e19), 200)  # OpenDP itself: P(one reaches 2^63) ~ 0.8
    edges = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    assert np.isin(saturated, edges).any()
    sampler = OpenDPDiscreteLaplace()
    within = sampler.discrete_laplace(MAX_NOISE_SCALE, 200)
    assert np.all(np.abs(within) < 2**56)


@pytest.mark.parametrize("scale", [5e19, 2.0**40 * 1.000001, 2.0**-41])
@pytest.mark.parametrize("sampler", [OpenDPDiscreteLaplace(), InsecureSeededSampler(1)])
def test_the_samplers_refuse_to_draw_outside_the_safe_range(scale: float, sampler: Any) -> None:
    """The spec, planner and counters refuse such scales first; the samplers do too, so no
    caller can draw saturating noise (a code review found only finiteness checked there)."""
    with pytest.raises(ConfigError, match=r"outside the sampler's safe range \[2\^-40, 2\^40\]"):
        sampler.discrete_laplace(scale, 3)


def test_streamdp_plan_refuses_with_the_limit_in_its_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from streamdp.cli import main

    args = ["plan", "--horizon", "100", "--sensitivity", "5", "--format", "json"]
    assert main([*args, "--epsilon", "1e-19"]) == 2
    assert "above the limit 2^40" in capsys.readouterr().err
    assert main([*args, "--epsilon", "0.1"]) == 0


@pytest.mark.parametrize(
    ("horizon", "sensitivity", "epsilon"),
    [(366, 5.0, 1e-12), (120, 1.0, 1e-14), (365, 5.0, 1e300), (4095, 1.0, 1e-13), (7, 3.0, 1e20)],
)
def test_the_epsilon_a_limit_error_suggests_is_accepted(
    horizon: int, sensitivity: float, epsilon: float
) -> None:
    """An audit followed the hint "raise epsilon to at least 8.22e-11" and was refused again:
    the bound was printed rounded to nearest. It is now rounded away from the limit."""
    import re

    with pytest.raises(ConfigError) as refused:
        plan("fda", "total", horizon, epsilon, sensitivity, "discrete-laplace")
    found = re.search(r"(?:at least|at most) ([0-9.e+-]+)", str(refused.value))
    assert found is not None, refused.value
    plan("fda", "total", horizon, float(found.group(1)), sensitivity, "discrete-laplace")


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('allowed_lateness = "1h"', 'allowed_lateness = "99999999999d"', "allowed_lateness"),
        ('allowed_lateness = "1h"', "allowed_lateness = 1e400", "allowed_lateness"),
    ],
)
def test_a_duration_that_would_never_release_is_refused(old: str, new: str, field: str) -> None:
    """An audit loaded a spec whose lateness was 1e400 s (read as infinite) or 99999999999 days:
    its replay released nothing, spent nothing and exited 0."""
    assert old in RESTAURANT
    with pytest.raises(ConfigError, match=rf"{field}.*longer than 100 years"):
        parse_spec(RESTAURANT.replace(old, new, 1))
