"""A small version of ``county_admissions.toml`` for tests that run many draws: the example
spec with a synthetic nation of 4 states and 14 counties (19 places x 2 sexes = 38 counters)
in place of its 3,194 places, revised every two periods (the example revises weekly)."""

from __future__ import annotations

from dataclasses import replace

from streamdp.engine import EngineSpec
from streamdp.engine.spec import ConsistencySpec, CounterSpec
from streamdp.kinds.places_file import parse_places
from streamdp.synth import example_spec
from streamdp.synth.geography import places_csv, synthetic_counties


def small_county_spec(states: int = 4, counties: int = 14) -> EngineSpec:
    """``county_admissions.toml`` over a small synthetic geography (see the module)."""
    spec = example_spec("county-admissions")
    text = places_csv(synthetic_counties(states=states, counties=counties))
    places = parse_places(text.encode(), "small-counties.csv")
    streams = {
        name: replace(
            stream,
            counters=CounterSpec(
                kind="places",
                attributes=stream.counters.attributes,
                places=places,
                place_field=stream.counters.place_field,
            ),
            consistency=ConsistencySpec(every_periods=2),
        )
        for name, stream in spec.streams.items()
    }
    return replace(spec, streams=streams)
