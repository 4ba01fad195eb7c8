"""Schema version 2 (issue 14: one vocabulary): the first format's names are refused with the
new name, and a state stored under the first format restores once the keys are renamed."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from streamdp.engine import Engine, parse_spec
from streamdp.engine.periods import PeriodClock
from streamdp.engine.records import SCHEMA_VERSION
from streamdp.errors import ConfigError, StateError
from streamdp.noise import InsecureSeededSampler

REPO = Path(__file__).resolve().parents[1]
HIV = (REPO / "streamdp" / "examples" / "hiv.toml").read_text()


@pytest.mark.parametrize(
    ("old", "new"),
    [("sensitivity = 1", "delta = 1"), ('mechanism = "fda"', 'strategy = "fda"')],
)
def test_a_first_format_key_is_refused_with_its_new_name(old: str, new: str) -> None:
    text = HIV if old in HIV else HIV.replace("horizon = 120", f"horizon = 120\n{old}")
    assert old in text
    old_key, new_key = old.split(maxsplit=1)[0], new.split(maxsplit=1)[0]
    with pytest.raises(ConfigError, match=rf"{new_key}.*renamed to '{old_key}'"):
        parse_spec(text.replace(old, new))


def test_over_delta_is_refused_with_its_new_name() -> None:
    text = HIV.replace("horizon = 120", 'horizon = 120\nover_delta = "reject"')
    with pytest.raises(ConfigError, match=r"over_delta.*renamed to 'over_sensitivity'"):
        parse_spec(text)


def _legacy_fingerprint(raw: dict) -> str:
    """The fingerprint the first format stored: the same canonical JSON, old key names (an
    independent re-statement of the rule, not a call of the code under test). The first format
    had no wording keys (``title``, ``description``, ``unit``): the example's, added since, were
    not in the stored configuration."""
    old_names = {"sensitivity": "delta", "mechanism": "strategy", "over_sensitivity": "over_delta"}
    wording = ("title", "description", "unit")
    legacy = dict(raw)
    legacy["streams"] = {
        name: {old_names.get(k, k): v for k, v in table.items() if k not in wording}
        for name, table in raw["streams"].items()
    }
    text = json.dumps(legacy, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_state_stored_under_the_first_format_restores_after_the_rename() -> None:
    spec = parse_spec(HIV)
    engine = Engine(spec, sampler=InsecureSeededSampler(0))
    name, stream = next(iter(spec.streams.items()))
    assert engine.close(name, through=PeriodClock(stream.period).bounds(4)[1])  # 5 releases
    state = engine.snapshot()
    state["spec_fingerprint"] = _legacy_fingerprint(dict(spec.raw))
    assert state["spec_fingerprint"] != spec.fingerprint()
    restored = Engine(spec, sampler=InsecureSeededSampler(0))
    restored.restore(state)
    assert restored.snapshot() == engine.snapshot()
    # the legacy form of ANOTHER configuration is still refused
    other = parse_spec(HIV.replace("epsilon = 1.0\nsensitivity", "epsilon = 0.5\nsensitivity"))
    assert other.fingerprint() != spec.fingerprint()
    with pytest.raises(StateError, match="different configuration"):
        Engine(other, sampler=InsecureSeededSampler(0)).restore(state)


def test_records_say_schema_version_2_and_name_the_sensitivity() -> None:
    assert SCHEMA_VERSION == 2
    for name in ("release", "consistent", "dead_letter"):
        schema = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())
        assert schema["properties"]["schema_version"] == {"const": 2}
        assert "delta" not in schema["properties"]
    release = json.loads((REPO / "schemas" / "release.schema.json").read_text())
    assert "sensitivity" in release["required"]
    reasons = json.loads((REPO / "schemas" / "dead_letter.schema.json").read_text())
    text = json.dumps(reasons)
    assert "contribution_over_sensitivity" in text
    assert not re.search(r"over_delta", text)
