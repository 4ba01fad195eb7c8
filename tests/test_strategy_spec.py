"""Selecting the k-ary strategies in a stream spec: names, objective, branching, errors."""

from __future__ import annotations

import pytest

from streamdp.continual.strategy import build_any_strategy, check_noise_scales
from streamdp.engine import parse_spec
from streamdp.errors import ConfigError

SPEC = """
[sources.s]
topic = "t"
kind = "person"
epsilon_cap = 1

[streams.a]
source = "s"
epsilon = 0.5
sensitivity = 1
horizon = 365
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}
{extra}
"""


@pytest.mark.parametrize(
    ("extra", "mechanism", "objective", "branching"),
    [
        ('mechanism = "kary_gls"', "kary_gls", "total", None),
        ('mechanism = "kary_digits"\nobjective = "minimax"', "kary_digits", "minimax", None),
        ('mechanism = "kary_gls"\nobjective = "count"\nbranching = 4', "kary_gls", "count", 4),
        ("", "fda", "total", None),
    ],
)
def test_kary_strategies_are_selectable(
    extra: str, mechanism: str, objective: str, branching: int | None
) -> None:
    stream = parse_spec(SPEC.format(extra=extra)).streams["a"]
    assert (stream.mechanism, stream.objective, stream.branching) == (
        mechanism,
        objective,
        branching,
    )
    strategy = build_any_strategy(stream.mechanism, stream.objective, 365, stream.branching)
    assert strategy.horizon == 365
    if branching is not None:
        assert getattr(strategy, "branching", None) == branching


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('mechanism = "fda"\nbranching = 4', "field 'branching': applies to kary_digits"),
        ('objective = "count"', "field 'objective': 'count' does not apply to mechanism 'fda'"),
        (
            'mechanism = "binary"\nobjective = "minimax"',
            "field 'objective': 'minimax' does not apply to mechanism 'binary'; it takes 'total'",
        ),
        ('mechanism = "kary_gls"\nbranching = 1', "branching"),
        ('mechanism = "kary_gls"\nbranching = 65', "branching"),
    ],
)
def test_kary_spec_errors_say_what_to_do(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(SPEC.format(extra=extra))


def test_noise_scale_limits_apply_to_kary_levels() -> None:
    check_noise_scales("kary_gls", "total", 365, 0.5, 1.0)
    with pytest.raises(ConfigError, match="outside"):
        check_noise_scales("kary_gls", "total", 365, 1e-13, 1.0)
