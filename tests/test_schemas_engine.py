"""Every record streamdp writes validates against its JSON Schema, every example does too, and
the schemas agree with the engine's hand-written validation on synthetic good and bad input."""

from __future__ import annotations

import json
from pathlib import Path

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
