"""Specs for tests that run a scenario through the engine or the daemon's service: the
examples, shortened so that a short run rolls epochs and revises often, with a mechanism
suffix (``census+zcdp_blt``, ``hospital-patients+kary_gls``, ``restaurant-rolling``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from streamdp.engine import EngineSpec, parse_spec
from streamdp.synth import example_spec

#: The privacy-unit key of the scenarios with a unit (the others ignore it).
UNIT_KEY = b"snapshot-test-unit-key-0123456789"


def _example_text(name: str) -> str:
    return resources.files("streamdp").joinpath("examples", f"{name}.toml").read_text("utf-8")


def _restaurant_rolling_spec(mechanism: str = "fda") -> EngineSpec:
    text = (
        _example_text("restaurant")
        .replace("horizon = 366", "horizon = 8")
        .replace("every_periods = 7", "every_periods = 3")
        .replace('mechanism = "fda"', f'mechanism = "{mechanism}"')
    )
    return parse_spec(text)


def scenario_spec(scenario: str) -> EngineSpec:
    """``restaurant-rolling`` (8-day epochs, combos, revisions every 3 days) or an example;
    a ``+kary_gls`` / ``+kary_digits`` suffix sets every stream's mechanism (the k-ary
    counters draw an epoch's noise at its first close and must restore it, not redraw it)."""
    base, _, mechanism = scenario.partition("+")
    if base == "restaurant-rolling":
        return _restaurant_rolling_spec(mechanism or "fda")
    if mechanism.startswith("zcdp"):  # the zCDP example of the base (census_zcdp.toml)
        text = _example_text(f"{base}_zcdp").replace("horizon = 120", "horizon = 8")
        if mechanism == "zcdp":  # the example runs blt; this one the k-ary GLS tree
            text = text.replace('mechanism = "blt"', 'mechanism = "kary_gls"')
        return parse_spec(text)
    if base in ("hospital-patients", "county-admissions"):  # short epochs, frequent revisions
        examples = Path(str(resources.files("streamdp")))
        text = (
            _example_text(base.replace("-", "_"))
            .replace(
                "horizon = 365", "horizon = 16" if base == "hospital-patients" else "horizon = 8"
            )
            .replace("every_periods = 7", "every_periods = 3")
            .replace(
                'places = "counties.csv"', f'places = "{examples / "examples" / "counties.csv"}"'
            )
        )
        if mechanism:
            text = text.replace("\nhorizon = ", f'\nmechanism = "{mechanism}"\nhorizon = ')
        return parse_spec(text)
    if not mechanism:
        return example_spec(base)
    text = _example_text(base).replace("\nhorizon = ", f'\nmechanism = "{mechanism}"\nhorizon = ')
    return parse_spec(text)
