"""Every record streamdp writes validates against its JSON Schema, every example does too, and
the schemas agree with the engine's hand-written validation on synthetic good and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_engine_support import drive

from streamdp.engine import Engine
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
NAMES = ("order_event", "person_event", "control", "release", "consistent", "dead_letter")


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", NAMES)
def test_every_example_validates(name) -> None:
    examples = json.loads((SCHEMAS / "examples" / f"{name}.json").read_text())
    assert examples
    validator = _validator(name)
    for example in examples:
        validator.validate(example)
    # and the schema is not vacuous: dropping a required field fails
    required = validator.schema["required"]
    broken = {k: v for k, v in examples[0].items() if k != required[-1]}
    assert not validator.is_valid(broken)


@pytest.mark.parametrize(
    ("scenario", "periods"), [("restaurant", 20), ("hospital", 40), ("census", 4)]
)
def test_every_written_record_validates(scenario, periods) -> None:
    spec = example_spec(scenario)
    lines = list(generate(scenario, periods, 12, seed=1, bad_fraction=0.2))
    engine = Engine(spec, sampler=InsecureSeededSampler(0))
    outputs, letters = drive(engine, [line.text for line in lines])
    for stream in spec.streams:
        outputs += engine.revise(stream)
    kinds = {"release": _validator("release"), "consistent": _validator("consistent")}
    seen = set()
    for record in outputs:
        data = json.loads(record.to_json())
        kinds[data["kind"]].validate(data)
        assert data["key"] == record.key
        if data["kind"] == "release":  # the examples word every stream: each release says it
            about = spec.streams[data["stream"]].about
            assert (data["title"], data["description"], data["unit"]) == (
                about.title, about.description, about.unit,
            )  # fmt: skip
            # and the source it reads: streams of one source compose (the feed sums them)
            assert data["source"] == spec.streams[data["stream"]].source
            assert data["period_unit"] == spec.streams[data["stream"]].period.unit
        seen.add(data["kind"])
    assert seen == {"release", "consistent"}
    dead = _validator("dead_letter")
    assert letters
    for letter in letters:
        dead.validate(json.loads(letter.to_json()))

    event_kind = "order_event" if scenario == "restaurant" else "person_event"
    events, controls = _validator(event_kind), _validator("control")
    schema_level = {
        "malformed",
        "schema_violation",
        "bad_timestamp",
        "invalid_quantity",
        "bad_control",
    }
    for line in lines:
        try:
            data = json.loads(line.text)
        except json.JSONDecodeError:
            assert line.expect == "malformed"
            continue
        validator = controls if data.get("type") == "control" else events
        if line.expect is None:
            validator.validate(data)
        elif line.expect in schema_level:
            assert not validator.is_valid(data), line.text


def test_dead_letter_reasons_are_the_engines() -> None:
    # the schema's reason enum and the engine's Reason literal are one list (both grow together)
    from streamdp.engine import REASONS

    enum = _validator("dead_letter").schema["properties"]["reason"]["enum"]
    assert sorted(enum) == sorted(REASONS)


WEIGHTS = "attribute_weights = { total = 1, sex = 1, race = 2, age = 4, cells = 8 }"
EXAMPLES = Path(__file__).resolve().parent.parent / "streamdp" / "examples"
#: Every kind of stream a consumer can meet, as (data scenario, example spec, edits to its text):
#: places with level budgets and non-negative integers (wide: consistent records in parts),
#: places under zCDP, census with attribute budgets, census under zCDP (blt), privacy units.
KINDS = {
    "places-levels-integers": (
        "county-admissions",
        "county_admissions.toml",
        [
            ('kind = "places"', 'kind = "places"\nlevel_weights = [1, 1, 4]'),
            ("at_epoch_end = true }", "at_epoch_end = true, nonnegative_integers = true }"),
        ],
    ),
    "places-zcdp": (
        "county-admissions",
        "county_admissions.toml",
        [
            ('kind = "places"', 'kind = "places"\nlevel_weights = [1, 2, 3]'),
            ("epsilon_cap = 1.0", "rho_cap = 0.5"),
            ("epsilon = 1.0", 'privacy = { definition = "zcdp", rho = 0.5 }\nmechanism = "binary"'),
        ],
    ),
    "census-attribute-weights": (
        "census",
        "census.toml",
        [
            (
                'kind = "attributes"',
                'kind = "attributes"\n' + WEIGHTS,
            )
        ],
    ),
    "census-zcdp": ("census", "census_zcdp.toml", []),
    "privacy-units": ("hospital-patients", "hospital_patients.toml", []),
}


def _kind_records(kind: str) -> list[dict[str, Any]]:
    from streamdp.engine.spec_loading import parse_spec

    scenario, file, edits = KINDS[kind]
    text = (EXAMPLES / file).read_text()
    for old, new in edits:
        assert old in text, (file, old)
        text = text.replace(old, new, 1)
    spec = parse_spec(text, origin=str(EXAMPLES / file))
    lines = list(generate(scenario, 3, 20, seed=1, spec=spec))
    engine = Engine(spec, sampler=InsecureSeededSampler(0), unit_key=b"k" * 32)
    outputs, _ = drive(engine, [line.text for line in lines])
    for stream in spec.streams:
        outputs += engine.revise(stream)
    return [json.loads(record.to_json()) for record in outputs]


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind_records(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, _kind_records(request.param)


def test_every_kind_of_stream_writes_records_its_schema_accepts(kind_records) -> None:
    kind, records = kind_records
    validators = {"release": _validator("release"), "consistent": _validator("consistent")}
    fields: set[str] = set()
    for data in records:
        validators[data["kind"]].validate(data)
        fields |= set(data)
    # the optional fields of that kind were written (the check is not vacuous)
    expected = {
        "places-levels-integers": {"place", "cell", "budget_group", "part", "nonnegative_counts"},
        "places-zcdp": {"place", "budget_group", "privacy_definition", "part"},
        "census-attribute-weights": {"budget_group"},
        "census-zcdp": {"privacy_definition", "rho", "privacy_delta", "l2_sensitivity"},
        "privacy-units": {"privacy_unit"},
    }[kind]
    assert expected <= fields, expected - fields


def test_the_schemas_reject_what_no_stream_writes(kind_records) -> None:
    """Mixing one kind's fields into a record that does not have them, or dropping one of a
    pair the code always writes together, is refused: a consumer validating with the schemas
    learns of a malformed record instead of reading, say, an epsilon share as a rho."""
    _, records = kind_records
    release = _validator("release")
    consistent = _validator("consistent")
    one = next(r for r in records if r["kind"] == "release")
    broken: list[dict[str, Any]] = []
    if "budget_group" in one:
        group = one["budget_group"]
        other = "epsilon" if "rho" in group else "rho"
        broken.append({**one, "budget_group": {**group, other: 0.1}})  # both amounts
        stripped = {k: v for k, v in group.items() if k not in ("epsilon", "rho")}
        broken.append({**one, "budget_group": stripped})  # neither
        mine = "rho" if "rho" in group else "epsilon"
        swapped = {**stripped, other: group[mine]}  # the other definition's amount
        broken.append({**one, "budget_group": swapped})
    if "privacy_definition" in one:
        pure = {k: v for k, v in one.items() if k != "privacy_definition"}
        broken.append(pure)  # zCDP fields on a record that does not say it is zCDP
    if "cell" in one:
        broken.append({k: v for k, v in one.items() if k != "place"})  # a cell with no place
    for record in broken:
        assert not release.is_valid(record), record
    parts = [r for r in records if r["kind"] == "consistent" and "part" in r]
    for record in parts[:1]:
        assert not consistent.is_valid({k: v for k, v in record.items() if k != "parts"})
        assert not consistent.is_valid({k: v for k, v in record.items() if k != "part"})
        whole_key = record["key"].rsplit("|", 1)[0]
        assert not consistent.is_valid({**record, "key": whole_key})  # a part's key ends |part
    whole = next((r for r in records if r["kind"] == "consistent" and "part" not in r), None)
    if whole is not None:
        assert not consistent.is_valid({**whole, "key": whole["key"] + "|1"})


#: The example spec each release example comes from (by key).
EXAMPLE_SPECS = {
    "restaurant-items|cola|0|61": "restaurant.toml",
    "admissions-by-county|S05-C003/sex=female|0|3": "county_admissions.toml",
    "census|sex=female|0|2": "census_zcdp.toml",
    "hiv-admissions|hiv_positive_admissions|0|2": "hospital_patients.toml",
}


def test_the_release_examples_show_every_kind_of_stream() -> None:
    """A plain stream, a places stream, a zCDP stream and one protecting a person: the
    optional fields of each are shown in an example."""
    examples = json.loads((SCHEMAS / "examples" / "release.json").read_text())
    assert sorted(e["key"] for e in examples) == sorted(EXAMPLE_SPECS)
    shown = set().union(*examples)
    assert {"place", "cell", "privacy_definition", "l2_sensitivity", "privacy_unit"} <= shown


@pytest.mark.parametrize("key", sorted(EXAMPLE_SPECS))
def test_release_examples_are_what_their_spec_writes(key: str) -> None:
    """Every field of a release example but the noisy values (a draw) and the sampler (the
    test's is seeded) is what the engine writes for that key under its example spec: a reader
    checking the examples' standard deviations against the mechanism finds them true."""
    from streamdp.engine.periods import parse_instant
    from streamdp.engine.spec_loading import parse_spec

    examples = json.loads((SCHEMAS / "examples" / "release.json").read_text())
    example = next(e for e in examples if e["key"] == key)
    path = EXAMPLES / EXAMPLE_SPECS[key]
    spec = parse_spec(path.read_text(), origin=str(path))
    engine = Engine(spec, sampler=InsecureSeededSampler(0), unit_key=b"k" * 32)
    end = parse_instant(example["period_end"])
    assert end is not None
    after = end + 3 * 86400  # past the lateness and the delivery allowance
    written = next(json.loads(r.to_json()) for r in engine.advance_clock(after) if r.key == key)
    random = {"noisy_count", "noisy_total", "noise", "noise_secure"}
    # A BLT stream's standard deviations come from parameters L-BFGS-B optimises, and its
    # steps run on the BLAS kernel OpenBLAS picks for the CPU: measured on one host, the
    # SkylakeX and Haswell kernels (OPENBLAS_CORETYPE) gave parameters 1e-8 apart and
    # standard deviations 6e-10 apart. Those are compared to a relative 1e-6 (a wrong
    # mechanism or budget is off by far more); every other field exactly.
    host_dependent = {"count_std", "total_std"} if example.get("mechanism") == "blt" else set()
    assert {k: v for k, v in written.items() if k not in random | host_dependent} == {
        k: v for k, v in example.items() if k not in random | host_dependent
    }
    for field in sorted(host_dependent):
        assert written[field] == pytest.approx(example[field], rel=1e-6), field
    assert example["noise_secure"]
    assert example["noise"].startswith("opendp-")
