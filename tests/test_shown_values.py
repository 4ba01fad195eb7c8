"""Errors show values as their author wrote them, not as Python reprs (audit item 7)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from streamdp.engine.spec_loading import parse_spec
from streamdp.errors import ConfigError
from streamdp.record_words import describe_record
from streamdp.shown_value import shown

STREAM = """
[sources.a]
kind = "person"
epsilon_cap = 1.0
[streams.s]
source = "a"
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "f", name = "c" }}
{fields}
"""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("epsilon = -1.0\nsensitivity = 1\nhorizon = 12",
         "field 'epsilon': must be a positive decimal number such as 0.5, got -1.0"),
        ("epsilon = 1.0\nsensitivity = 1\nhorizon = 36.5",
         "field 'horizon': must be an integer, got 36.5"),
        ("epsilon = 1.0\nsensitivity = true\nhorizon = 12",
         "field 'sensitivity': must be an integer, got true"),
        ("epsilon = 1.0\nsensitivity = 1\nhorizon = 12\nallowed_lateness = [1, 2.5]",
         "got [1, 2.5]"),
    ],
)  # fmt: skip
def test_spec_errors_show_toml_values(fields: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_spec(STREAM.format(fields=fields))
    text = str(caught.value)
    assert message in text
    assert "Decimal(" not in text
    assert "True" not in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("-1.0"), "-1.0"),
        (True, "true"),
        (False, "false"),
        (None, "not set"),
        ("x y", "'x y'"),
        ({"unit": "day", "n": Decimal("2")}, "{ unit = 'day', n = 2 }"),
    ],
)
def test_shown_spells_values_like_toml(value: object, text: str) -> None:
    assert shown(value) == text


def test_tail_says_a_dead_letter_has_no_event_id_instead_of_none() -> None:
    letter = {
        "kind": "dead_letter",
        "reason": "malformed",
        "topic": "orders",
        "offset": 4,
        "event_id": None,
        "message": "not JSON",
        "raw_length": 9,
    }
    line = describe_record(letter)
    assert line is not None
    assert "None" not in line
    assert '(no event id): "not JSON"' in line
    assert "event abc:" in (describe_record({**letter, "event_id": "abc"}) or "")
