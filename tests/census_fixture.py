"""Census streams whose total, marginals and cells have their own shares of the budget
(``counters.attribute_weights``, issue 29; seed 002): the example ``census.toml`` with weights,
and a small census (sex 2 x age 3: 12 counters, daily, horizon 8) for tests that run many
draws."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from streamdp.engine import EngineSpec, parse_spec
from streamdp.synth import example_spec

SMALL_CENSUS = """
[sources.census-records]
topic = "census-records"
kind = "person"
epsilon_cap = 1

[streams.people]
source = "census-records"
epsilon = 1
sensitivity = 4
horizon = 8
period = {{ unit = "day", start = "2024-01-01" }}
mechanism = "{mechanism}"
constraints = {{ kind = "hierarchy" }}
consistency = {{ every_periods = 2, at_epoch_end = true }}

[streams.people.counters]
kind = "attributes"
attributes = [
    {{ name = "sex", categories = ["female", "male"] }},
    {{ name = "age", categories = ["0-17", "18-64", "65+"] }},
]
{weights}
"""


def small_census_text(weights: tuple[int, ...] = (), mechanism: str = "fda") -> str:
    """The small census's TOML (see the module); ``weights`` for total, sex, age and cells."""
    written = ""
    if weights:
        names = ("total", "sex", "age", "cells")
        pairs = ", ".join(f"{n} = {w}" for n, w in zip(names, weights, strict=True))
        written = f"attribute_weights = {{ {pairs} }}"
    return SMALL_CENSUS.format(mechanism=mechanism, weights=written)


def small_census_spec(weights: tuple[int, ...] = (), mechanism: str = "fda") -> EngineSpec:
    """The small census (see the module); ``weights`` for total, sex, age and cells."""
    return parse_spec(small_census_text(weights, mechanism))


def weighted_census_spec(weights: tuple[int, ...] = (1, 1, 2, 4, 8)) -> EngineSpec:
    """``census.toml`` (sex, race, age) with ``weights`` for total, sex, race, age and cells."""
    spec = example_spec("census")
    streams = {
        name: replace(
            stream,
            counters=replace(stream.counters, attribute_weights=tuple(Decimal(w) for w in weights)),
        )
        for name, stream in spec.streams.items()
    }
    return replace(spec, streams=streams)
