"""A release record's JSON is assembled from pre-written pieces (streamdp/engine/json_text.py:
a wide close writes a million of them), and must stay what ``json.dumps`` of its dict gives,
byte for byte: on every example spec's releases, and on arbitrary names, labels and numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdp.engine import Engine
from streamdp.engine.counter_fields import PlaceColumns
from streamdp.engine.release_record import ReleaseContext, ReleaseRecord
from streamdp.engine.spec_loading import parse_spec
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import SCENARIOS, example_spec, generate, release_instant

ROOT = Path(__file__).resolve().parents[1]
PERIODS = 3


def stdlib_json(record: ReleaseRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"))


def _releases(scenario: str, spec_file: str | None = None) -> list[ReleaseRecord]:
    if spec_file is None:
        spec = example_spec(scenario)
    else:
        path = ROOT / "streamdp" / "examples" / spec_file
        spec = parse_spec(path.read_text("utf-8"), origin=str(path))
    engine = Engine(spec, sampler=InsecureSeededSampler(3), unit_key=b"k" * 32)
    for line in generate(scenario, PERIODS, 15.0, seed=2, spec=spec):
        engine.ingest(line.text.encode())
    out = engine.advance_clock(release_instant(spec, PERIODS))
    return [r for r in out if isinstance(r, ReleaseRecord)]


@pytest.mark.parametrize(
    ("scenario", "spec_file"),
    [(s, None) for s in SCENARIOS] + [("census", "census_zcdp.toml")],
)
def test_every_example_release_is_written_as_json_dumps_writes_it(
    scenario: str, spec_file: str | None
) -> None:
    releases = _releases(scenario, spec_file)
    assert releases, "the example released nothing"
    kinds = {r.mechanism for r in releases}
    assert kinds  # the spec's mechanisms, whatever they are
    for record in releases:
        assert record.to_json() == stdlib_json(record)
        assert json.loads(record.to_json())["key"] == record.key


def test_places_releases_carry_their_place_as_before() -> None:
    """The county example's releases: place and cell fields in the text."""
    releases = _releases("county-admissions")
    data = json.loads(releases[-1].to_json())
    assert {"node", "parent", "label", "level"} <= set(data["place"])
    assert "cell" in data


text = st.text(max_size=12)  # any code point, lone surrogates included
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
optional = st.dictionaries(
    st.sampled_from(["source", "period_unit", "title", "unit", "rho", "privacy_unit"]),
    st.one_of(text, numbers, st.none(), st.dictionaries(text, numbers, max_size=2)),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    strings=st.lists(text, min_size=9, max_size=9),
    values=st.lists(numbers, min_size=7, max_size=7),
    secure=st.booleans(),
    index=st.integers(min_value=0, max_value=10**9),
    optional_fields=optional,
)
def test_any_release_is_written_as_json_dumps_writes_it(
    strings: list[str],
    values: list[int | float],
    secure: bool,
    index: int,
    optional_fields: dict[str, object],
) -> None:
    stream, counter, start, end, mechanism, objective, noise, _, _ = strings
    epsilon, sensitivity, horizon, count, total, count_std, total_std = values
    context = ReleaseContext(
        stream=stream,
        epoch=3,
        period=7,
        period_start=start,
        period_end=end,
        epsilon=float(epsilon),
        sensitivity=int(sensitivity) if isinstance(sensitivity, int) else 2,
        horizon=int(horizon) if isinstance(horizon, int) else 8,
        mechanism=mechanism,
        objective=objective,
        noise=noise,
        noise_secure=secure,
        optional_fields=optional_fields,
    )
    record = ReleaseRecord(context, counter, index, count, total, float(count_std), total_std)
    assert record.to_json() == stdlib_json(record)


@settings(max_examples=200, deadline=None)
@given(
    node=text,
    parent=st.one_of(st.none(), text),
    label=text,
    level=st.integers(min_value=0, max_value=40),
)
def test_a_place_is_written_as_json_dumps_writes_it(
    node: str, parent: str | None, label: str, level: int
) -> None:
    columns = PlaceColumns((node,), (parent,), (label,), (level,), ())
    expected = json.dumps({"place": columns.place(0)}, separators=(",", ":"))[1:-1]
    assert columns.place_json(0) == expected


def test_optional_fields_may_not_shadow_a_release_field() -> None:
    with pytest.raises(ValueError, match="shadow"):
        ReleaseContext(
            stream="s",
            epoch=0,
            period=1,
            period_start="a",
            period_end="b",
            epsilon=1.0,
            sensitivity=1,
            horizon=4,
            mechanism="fda",
            objective="mean",
            noise="n",
            noise_secure=True,
            optional_fields={"epsilon": 2.0},
        )
