"""What the feed reads and where it writes (audit F2, F3, F4, F8's server and CLI parts).

- a replay directory whose files are replaced by another replay is read afresh: the view
  equals one read from the new files alone, never a mix (F2);
- records of an unknown ``schema_version``, of another kind or not JSON are not shown, and the
  operator's console (stderr) says how many by reason; the public page never does (F3);
- ``--output-dir`` that is, or is inside, the ``--from`` directory, or that holds a replay's
  protected files, or that is a file, is refused in one line with exit status 2 (F4, F8);
- HEAD answers the length GET would send (F8).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from streamdp.feed.model import RELEASE_COLUMNS, FeedView, to_csv
from streamdp.feed.sources import ReplayDirectory
from tests.test_feed import EXAMPLES, Served

EXAMPLE = json.loads((EXAMPLES / "release.json").read_text())[0]


def _release(period: int, count: int, **fields: Any) -> dict[str, Any]:
    key = f"{EXAMPLE['stream']}|{EXAMPLE['counter']}|0|{period}"
    return {**EXAMPLE, "key": key, "period": period, "noisy_count": count, **fields}


def _lines(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _fresh(path: Path) -> FeedView:
    """The view of ``path``'s directory read once from scratch."""
    view = FeedView()
    ReplayDirectory(path.parent).read_new(view)
    return view


def _csv(view: FeedView) -> str:
    return to_csv(view.release_rows(), RELEASE_COLUMNS)


@pytest.mark.parametrize("how", ["rewritten in place", "renamed over", "same first line"])
def test_a_replaced_releases_file_is_read_afresh_never_mixed(how: str, tmp_path: Path) -> None:
    """The audit's case: a longer replay replaces the file; the old offset falls inside one of
    its lines. Before the fix the row cut there was dropped and the old values kept."""
    path = tmp_path / "releases.jsonl"
    old = [_release(p, 100 + p) for p in (1, 2, 3)]
    path.write_text(_lines(old))
    directory, view = ReplayDirectory(tmp_path), FeedView()
    directory.read_new(view)
    assert len(view.releases) == 3
    # the new replay: other values and longer lines (the old offset cuts one of them)
    new = [_release(p, -1000 * p, title="A longer title") for p in range(1, 7)]
    if how == "same first line":
        new[0] = old[0]
    text = _lines(new)
    assert len(text) > path.stat().st_size
    if how == "renamed over":
        staged = tmp_path / "staged"
        staged.write_text(text)
        staged.replace(path)
    else:
        with path.open("w") as handle:  # the replay's sink truncates and rewrites
            handle.write(text)
    version = view.version
    directory.read_new(view)
    assert _csv(view) == _csv(_fresh(path))
    assert len(view.releases) == 6
    assert view.version > version  # a polling page redraws


def test_a_vanished_file_empties_what_it_showed(tmp_path: Path) -> None:
    path = tmp_path / "releases.jsonl"
    path.write_text(_lines([_release(1, 5)]))
    (tmp_path / "consistent.jsonl").write_text("")
    directory, view = ReplayDirectory(tmp_path), FeedView()
    directory.read_new(view)
    path.unlink()
    directory.read_new(view)
    assert view.releases == {}


def test_the_served_feed_follows_a_replaced_replay(tmp_path: Path) -> None:
    path = tmp_path / "releases.jsonl"
    path.write_text(_lines([_release(p, 100 + p) for p in (1, 2, 3)]))
    feed = Served("--from", str(tmp_path))
    try:
        assert len(list(csv.DictReader(io.StringIO(feed.get("releases.csv"))))) == 3
        new = [_release(p, -1000 * p, title="A longer title") for p in range(1, 7)]
        with path.open("w") as handle:
            handle.write(_lines(new))
        rows = list(csv.DictReader(io.StringIO(feed.get("releases.csv"))))
    finally:
        feed.stop()
    assert [int(r["noisy_count"]) for r in rows] == [r["noisy_count"] for r in new]
