"""The event-time text the engine takes is exactly the published schemas' (an audit of
2026-11-28: Python's ``fromisoformat`` also took ISO 8601 week dates, basic formats, hour-only
times and second-precision offsets, none of them RFC 3339, and refused the lowercase ``z`` and
``t`` the schemas allow, so a producer validating against the schema lost records)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streamdp.engine.periods import parse_instant

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
TEXTS = [
    "2024-01-05T00:00:00Z", "2024-01-05t00:00:00z", "2024-01-05 00:00:00+0100",
    "2024-01-05T00:00Z", "2024-01-05T00:00:00.123456Z", "2024-01-05T00:00:00.5+05:30",
    "2024-01-05T23:59:59-08:00", "2024-02-29T12:00:00z",
    "20240105T000000Z", "2024-W01-5T00:00:00Z", "2024-01-05T00Z", "2024-01-05T00:00:00,5Z",
    "2024-01-05T00:00:00+01:00:30", "2024-01-05T00:00:00", "2024-01-05T00:00:00+05",
    "2024-01-05", "2024-1-5T00:00:00Z", " 2024-01-05T00:00:00Z", "2024-01-05T00:00:00Z\n",
    "２０２４-01-05T00:00:00Z",
]  # fmt: skip


def _pattern(name: str) -> re.Pattern[str]:
    schema = json.loads((SCHEMAS / name).read_text())
    return re.compile(schema["properties"]["event_time"]["anyOf"][0]["pattern"], re.ASCII)


@pytest.mark.parametrize("schema", ["person_event.schema.json", "order_event.schema.json"])
def test_the_engine_reads_exactly_the_text_the_schema_allows(schema: str) -> None:
    pattern = _pattern(schema)
    for text in TEXTS:
        allowed = pattern.search(text) is not None and not text.endswith("\n")
        assert (parse_instant(text) is not None) == allowed, text


def test_case_and_separator_do_not_change_the_instant() -> None:
    texts = ("2024-01-05T00:00:00Z", "2024-01-05t00:00:00z", "2024-01-05 00:00:00+00:00",
             "2024-01-05T01:00:00+0100")  # fmt: skip
    same = {parse_instant(t) for t in texts}
    assert same == {1704412800.0}
