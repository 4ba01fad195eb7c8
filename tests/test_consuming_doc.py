"""docs/consuming.md says what a consumer gets: every column of the feed's CSV downloads is
documented with its meaning, and the console line it quotes is the one the feed prints."""

from __future__ import annotations

import re
from pathlib import Path

from streamdp.feed.console import ignored_line
from streamdp.feed.tables import CONSISTENT_COLUMNS, RELEASE_COLUMNS

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "consuming.md"


def _table_columns(heading: str) -> list[str]:
    """The first-cell names (in backticks) of the table under ``heading`` in the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if match := re.match(r"\| `([a-z0-9_]+)`", line):
            rows.append(match.group(1))
        elif rows and not line.startswith("|"):
            break
    return rows


def test_every_releases_csv_column_is_documented_in_order() -> None:
    assert _table_columns("#### `releases.csv`") == list(RELEASE_COLUMNS)


def test_every_consistent_csv_column_is_documented_in_order() -> None:
    assert _table_columns("#### `consistent.csv`") == list(CONSISTENT_COLUMNS)


def test_the_quoted_console_warning_is_what_the_feed_prints() -> None:
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    printed = ignored_line({"schema_version 99": 2, "not JSON": 1})
    quoted = f"`streamdp feed: warning: {printed} (docs/consuming.md, section 6)`"
    assert quoted in text
