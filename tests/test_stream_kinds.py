"""Stream kinds are plug-ins (issue 15): a kind written in one class, registered in the one
registry, is parsed, counted, released and refused like the built-in kinds, with no other
module changed. The built-in kinds' three uses of the census layout agree."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamdp.kinds
from streamdp.engine import parse_spec
from streamdp.engine.config_reader import ConfigReader
from streamdp.engine.events import Contribution, Extractor, RejectedError
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.revision import project_nodes
from streamdp.engine.spec import ConstraintSpec, CounterSpec, StreamSpec
from streamdp.errors import ConfigError
from streamdp.kinds.attributes import census_layout
from streamdp.kinds.base import dense_projection_diagonal
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec

SPEC = """
[sources.visits]
topic = "visits"
kind = "person"
epsilon_cap = 1.0

[streams.visits-daily]
source = "visits"
epsilon = 1.0
sensitivity = {sensitivity}
horizon = 10
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "every_record", name = "visits" }}
"""


class EveryRecordExtractor(Extractor):
    def contribution(self, event: Mapping[str, Any]) -> Contribution:
        if not isinstance(event.get("attributes"), dict):
            raise RejectedError("schema_violation", "field 'attributes' must be an object")
        return [(0, 1)]


class EveryRecordKind:
    """A new kind: one counter, +1 for every person record."""

    name = "every_record"
    source_kind = "person"
    constraint_kinds: tuple[str, ...] = ()

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        reader.only(table, ("kind", "name"), "counters")
        return CounterSpec(kind="every_record", items=(reader.name(table["name"], "name"),))  # type: ignore[arg-type]

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:
        raise AssertionError("no constraint kind to parse")

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        return counters.items

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        if sensitivity < 1:  # pragma: no cover - the spec already requires >= 1
            raise reader.fail("sensitivity", "one record adds 1")

    def extractor(self, spec: StreamSpec) -> Extractor:
        return EveryRecordExtractor()

    def project(self, spec: StreamSpec, values: Any) -> Any:
        return np.asarray(values, dtype=np.float64).copy()

    def projection_diagonal(self, spec: StreamSpec) -> Any:
        return dense_projection_diagonal(self, spec)  # type: ignore[arg-type]


def _event(i: int, day: int) -> str:
    return (
        f'{{"event_id": "v-{i}", "event_time": "2024-01-{day:02d}T12:00:00Z", '
        f'"attributes": {{"ward": "w{i % 3}"}}}}'
    )


def test_a_kind_in_one_class_is_parsed_counted_and_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"counters\.kind"):
        parse_spec(SPEC.format(sensitivity=1))  # not registered: refused like any typo
    monkeypatch.setitem(streamdp.kinds.KINDS, "every_record", EveryRecordKind())  # type: ignore[index]
    spec = parse_spec(SPEC.format(sensitivity=1))
    stream = spec.streams["visits-daily"]
    assert stream.counters.names == ("visits",)
    events = tmp_path / "events.jsonl"
    lines = [_event(i, 1 + i % 3) for i in range(30)] + ['{"event_id": "bad", "x": 1}']
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    sampler = InsecureSeededSampler(2)
    replay(spec, events, out, as_of=1704326400.0, sampler=sampler)  # closes 3 days
    released = read_jsonl(out / "releases.jsonl")
    assert [(r["counter"], r["period"]) for r in released] == [("visits", p) for p in (1, 2, 3)]
    assert read_jsonl(out / "dead_letter.jsonl")[0]["reason"] == "schema_violation"
    # the same input and noise with one record fewer moves a release by exactly that record
    events.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    replay(spec, events, tmp_path / "out2", as_of=1704326400.0,
           sampler=InsecureSeededSampler(2))  # fmt: skip
    again = read_jsonl(tmp_path / "out2" / "releases.jsonl")
    assert [a["noisy_count"] - b["noisy_count"] for a, b in zip(released, again, strict=True)] == [
        1, 0, 0,
    ]  # fmt: skip


def test_the_census_layout_is_the_one_the_names_extractor_and_projection_use() -> None:
    spec = example_spec("census").streams["census"]
    names = spec.counters.names
    layout = census_layout(spec.counters.attributes)
    assert names[0] == "total"
    for attribute, offset in zip(spec.counters.attributes, layout.marginal_offsets, strict=True):
        assert names[offset] == f"{attribute.name}={attribute.categories[0]}"
    assert layout.cell_offset + int(np.prod(layout.sizes)) == len(names)
    # one record's contribution lands on the names its attribute values spell
    extractor = streamdp.kinds.stream_kind("attributes").extractor(spec)
    values = {a.name: a.categories[-1] for a in spec.counters.attributes}
    touched = [names[i] for i, _ in extractor.contribution({"attributes": values})]
    cell = ",".join(f"{k}={v}" for k, v in values.items())
    assert touched == ["total", *(f"{k}={v}" for k, v in values.items()), cell]
    # a consistent vector (one record's) is left where it is by the projection
    vector = np.zeros((1, len(names)))
    for i, _ in extractor.contribution({"attributes": values}):
        vector[0, i] = 1.0
    np.testing.assert_allclose(project_nodes(spec, vector), vector, atol=1e-12)
