"""Records of wide streams hold no per-counter dicts: consistent records' maps are views over
arrays (streamdp/engine/counter_values.py) and a release's own fields (budget group, place,
cell) are built from the places' columns when it is serialised
(streamdp/engine/counter_fields.py). The views
behave as the dicts they replace (lookup, order, equality, membership) and serialise to the
same bytes, so a record built either way publishes identical JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamdp.engine import EngineSpec
from streamdp.engine.budget_groups import budget_groups
from streamdp.engine.counter_fields import CounterFields
from streamdp.engine.counter_values import CounterValues, plain
from streamdp.engine.records import ConsistentRecord
from tests.census_fixture import small_census_spec, weighted_census_spec
from tests.places_fixture import small_county_spec

NAMES = ("US", "US/a", "US/b", "CA", "CA/x")


def test_a_view_is_the_dict_of_its_range() -> None:
    values = np.asarray([1.5, -0.25, 1e-320, 3.0, 2.0 / 3.0])
    view = CounterValues(NAMES, values, 1, 4)
    expected = {"US/a": -0.25, "US/b": 1e-320, "CA": 3.0}
    assert len(view) == 3
    assert list(view) == list(expected)
    assert view == expected
    assert expected == view
    assert view["US/b"] == 1e-320
    assert type(view["CA"]) is float
    assert "CA" in view
    assert "US" not in view
    assert 7 not in view
    with pytest.raises(KeyError):
        view["CA/x"]
    assert plain(view) == expected
    assert list(plain(view)) == list(expected)
    assert dict(view.items()) == expected
    integers = CounterValues(NAMES, np.arange(5, dtype=np.int64))
    assert plain(integers) == dict(zip(NAMES, range(5), strict=True))
    assert all(type(v) is int for v in plain(integers).values())


def test_a_view_refuses_a_row_of_another_length_or_range() -> None:
    with pytest.raises(ValueError, match="5 names"):
        CounterValues(NAMES, np.zeros(4))
    with pytest.raises(ValueError, match="range"):
        CounterValues(NAMES, np.zeros(5), 3, 2)


def test_a_record_of_views_serialises_as_the_record_of_dicts() -> None:
    rng = np.random.default_rng(3)
    rows = [rng.normal(0, 10**e, 5) for e in (-3, 0, 9)] + [rng.integers(0, 9, 5)]
    for lo, hi in ((0, 5), (2, 4)):
        views = [CounterValues(NAMES, row, lo, hi) for row in rows]
        dicts = [dict(zip(NAMES[lo:hi], row[lo:hi].tolist(), strict=True)) for row in rows]

        def record(maps: list) -> ConsistentRecord:  # type: ignore[type-arg]
            return ConsistentRecord(
                stream="s", revision=2, periods_covered=4, epoch=0, period=3,
                period_start="2024-01-03T00:00:00Z", period_end="2024-01-04T00:00:00Z",
                counts=maps[0], totals=maps[1], constraint="tree", count_std=maps[2],
                total_std=maps[2], nonnegative_counts=maps[3], nonnegative_totals=maps[3],
            )  # fmt: skip

        assert record(views).to_json() == record(dicts).to_json()
        assert record(views) == record(dicts)
        assert json.loads(record(views).to_json())["counts"] == dicts[0]


def _reference_fields(spec: EngineSpec, c: int) -> dict[str, object]:
    """Counter ``c``'s fields written out from the places file and the budget groups."""
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    cells = stream.counters.width // places.size
    p = c // cells
    parent = int(places.tree.parent[p])
    out: dict[str, object] = {}
    for group in budget_groups(stream):
        if group.start <= c < group.stop:
            share = float(group.share)
            out["budget_group"] = {
                "name": group.name, "share": share, "epsilon": float(stream.epsilon) * share,
            }  # fmt: skip
    out["place"] = {
        "node": places.ids[p],
        "parent": None if parent < 0 else places.ids[parent],
        "label": places.labels[p],
        "level": int(places.depth[p]),
    }
    if stream.counters.attributes:
        out["cell"] = stream.counters.names[c].split("/", 1)[1]
    return out


@pytest.mark.parametrize("weights", [(), (1, 2, 5)])
def test_lazy_place_fields_are_the_fields_written_out(weights: tuple[int, ...]) -> None:
    """Every counter of the small county stream (with and without level weights): the lazy
    mapping has the reference's keys in its order and serialises to the same JSON."""
    spec = small_county_spec(level_weights=weights)
    stream = next(iter(spec.streams.values()))
    fields = CounterFields(stream)
    assert len(fields) == stream.counters.width
    for c in range(stream.counters.width):
        expected = _reference_fields(spec, c)
        got = fields.of(c)
        assert list(got) == list(expected)
        assert json.dumps({**got}) == json.dumps(expected)
    with pytest.raises(IndexError):
        fields.of(stream.counters.width)
    assert fields == CounterFields(stream)


def test_a_census_stream_with_weights_has_only_its_group_fields() -> None:
    stream = weighted_census_spec().streams["census"]
    fields = CounterFields(stream)
    assert dict(fields.of(0)) == {
        "budget_group": {"name": "total", "share": 1 / 16, "epsilon": 1 / 16}
    }
    assert fields.of(stream.counters.width - 1)["budget_group"]["name"] == "cells"  # type: ignore[index]
    assert dict(CounterFields(small_census_spec().streams["people"]).of(3)) == {}
