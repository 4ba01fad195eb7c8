"""A small version of ``county_admissions.toml`` for tests that run many draws: the example
spec with a synthetic nation of 4 states and 14 counties (19 places x 2 sexes = 38 counters)
in place of its 3,194 places, revised every two periods (the example revises weekly)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from streamdp.engine import EngineSpec
from streamdp.engine.spec import ConsistencySpec, CounterSpec
from streamdp.kinds.places_file import parse_places
from streamdp.synth import example_spec
from streamdp.synth.geography import places_csv, synthetic_counties


def small_county_spec(
    states: int = 4, counties: int = 14, level_weights: tuple[int, ...] = ()
) -> EngineSpec:
    """``county_admissions.toml`` over a small synthetic geography (see the module); with
    ``level_weights`` (nation, state, county) each level gets its own share of the budget."""
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
                level_weights=tuple(Decimal(w) for w in level_weights),
            ),
            consistency=ConsistencySpec(every_periods=2),
        )
        for name, stream in spec.streams.items()
    }
    return replace(spec, streams=streams)


def merged_parts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consistent records with the parts of each (revision, epoch, period) merged into one
    (a wide stream publishes a period's counters in several records), in first-seen order;
    every part must be present exactly once."""
    merged: dict[tuple[int, int, int], dict[str, Any]] = {}
    seen_parts: dict[tuple[int, int, int], list[int]] = {}
    for record in records:
        at = (record["revision"], record["epoch"], record["period"])
        seen_parts.setdefault(at, []).append(record.get("part", 1))
        held = merged.get(at)
        if held is None:
            merged[at] = {**record, **{m: dict(record[m]) for m in _MAPS}}
            continue
        for m in _MAPS:
            assert not held[m].keys() & record[m].keys(), f"{at}: a counter in two parts"
            held[m].update(record[m])
    for at, parts in seen_parts.items():
        assert sorted(parts) == list(range(1, merged[at].get("parts", 1) + 1)), at
    return list(merged.values())


_MAPS = ("counts", "totals", "count_std", "total_std")


def tree_gap(spec: EngineSpec, values: dict[str, float]) -> float:
    """The largest ``|place - sum of its children|`` over every inner place and cell of the
    spec's places stream, for one consistent record's ``counts`` or ``totals``."""
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    children: dict[str, list[str]] = {}
    for i, parent in enumerate(places.tree.parent.tolist()[1:], start=1):
        children.setdefault(places.ids[parent], []).append(places.ids[i])
    cells = sorted({name.split("/", 1)[1] for name in stream.counters.names})
    return max(
        abs(values[f"{parent}/{cell}"] - sum(values[f"{kid}/{cell}"] for kid in kids))
        for parent, kids in children.items()
        for cell in cells
    )
