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
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from streamdp.feed.model import CONFLICTING_REPUBLICATION, RELEASE_COLUMNS, FeedView, to_csv
from streamdp.feed.sources import ReplayDirectory
from tests.test_feed import EXAMPLES, SECRET, Served

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


def _mixed_file(directory: Path) -> list[dict[str, Any]]:
    """releases.jsonl with two good records (versions 2 and 1) and one of each kind of bad one;
    returns the good ones."""
    good = _release(1, 7)
    first = {k: v for k, v in _release(2, 8, schema_version=1).items() if k != "sensitivity"}
    first["delta"] = good["sensitivity"]  # version 1 called the sensitivity delta
    lines = [
        json.dumps(good),
        json.dumps(first),
        json.dumps(_release(3, 9, schema_version=99)),
        json.dumps(_release(4, 9, schema_version=True)),  # not an integer: true == 1 in Python
        json.dumps({k: v for k, v in _release(5, 9).items() if k != "schema_version"}),
        json.dumps({**_release(6, 9), "delta": 5, "sensitivity": None}),  # v2 has no delta
        json.dumps({"kind": "dead_letter", "raw": SECRET}),
        "{not json " + SECRET,
        json.dumps([1, 2]),
    ]
    (directory / "releases.jsonl").write_text("".join(line + "\n" for line in lines))
    return [good, first]


EXPECTED_REASONS = {
    "schema_version 99": 1,
    "unknown schema_version": 1,
    "no schema_version": 1,
    "missing or mistyped field": 1,
    "kind dead_letter": 1,
    "not JSON": 1,
    "not a JSON object": 1,
}


def test_only_known_schema_versions_are_shown_and_the_rest_counted_by_reason(
    tmp_path: Path,
) -> None:
    good = _mixed_file(tmp_path)
    view = _fresh(tmp_path / "releases.jsonl")
    assert sorted(key[3] for key in view.releases) == [r["period"] for r in good]
    assert {r.sensitivity for r in view.releases.values()} == {EXAMPLE["sensitivity"]}
    assert view.ignored_by_reason == EXPECTED_REASONS
    fair = json.loads((EXAMPLES / "consistent.json").read_text())[0]
    view.add({**fair, "schema_version": 3}, "consistent")
    assert view.consistent == {}
    assert view.ignored_by_reason["schema_version 3"] == 1


def test_the_known_versions_are_the_schemas_and_the_engines() -> None:
    from streamdp.engine.records import SCHEMA_VERSION
    from streamdp.feed.record_fields import KNOWN_SCHEMA_VERSIONS

    schemas = EXAMPLES.parent
    for name in ("release", "consistent"):
        schema = json.loads((schemas / f"{name}.schema.json").read_text())
        assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert max(KNOWN_SCHEMA_VERSIONS) == SCHEMA_VERSION
    assert set(KNOWN_SCHEMA_VERSIONS) == {1, 2}  # 1: read with delta as the sensitivity


def test_records_not_shown_are_reported_to_the_operator_never_published(tmp_path: Path) -> None:
    source = tmp_path / "out"
    source.mkdir()
    _mixed_file(source)
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", "feed", "--from", str(source),
         "--output-dir", str(site)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "streamdp feed: warning: 7 records not shown: " in done.stderr
    for reason, count in EXPECTED_REASONS.items():
        assert f"{count} {reason}" in done.stderr
    assert SECRET not in done.stderr
    for path in site.iterdir():
        text = path.read_text()
        assert "not shown" not in text, path
        assert "schema_version 99" not in text, path
        assert SECRET not in text, path
    # served: the console says it too
    feed = Served("--from", str(source))
    try:
        assert "not shown" not in feed.get("index.html")
    finally:
        errors = feed.stop()
    assert "7 records not shown: " in errors


def _feed(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdp", "feed", *args],
        check=False, capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


@pytest.fixture
def replayed(tmp_path: Path) -> Path:
    """A replay directory: its public releases and every protected file a replay writes."""
    from streamdp.engine.replay import REPLAY_OUTPUT_FILES

    out = tmp_path / "out"
    out.mkdir()
    (out / "releases.jsonl").write_text(_lines([_release(1, 5)]))
    (out / "consistent.jsonl").write_text("")
    for name in REPLAY_OUTPUT_FILES:
        if not (out / name).exists():
            (out / name).write_text(SECRET + "\n")
    assert {"dead_letter.jsonl", "ledger.jsonl", "snapshot.json"} <= set(REPLAY_OUTPUT_FILES)
    return out


@pytest.mark.parametrize(
    ("output_dir", "words"),
    [
        ("out", "is, is inside or holds the --from directory"),
        ("out/site", "is, is inside or holds the --from directory"),
        ("out/../out/.", "is, is inside or holds the --from directory"),
        (".", "is, is inside or holds the --from directory"),  # the replay would be under it
        ("other", "holds a replay's files (dead_letter.jsonl)"),
        ("afile", "is a file, not a directory"),
        ("afile/site", "cannot create --output-dir"),
    ],
)
def test_an_output_dir_that_would_publish_protected_files_is_refused_in_one_line(
    output_dir: str, words: str, replayed: Path, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "dead_letter.jsonl").write_text(SECRET)
    (tmp_path / "afile").write_text("not a directory")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = _feed("--from", str(replayed), "--output-dir", output_dir, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("streamdp feed: error: "), done.stderr
    assert words in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / output_dir / "index.html").exists()


def test_a_directory_of_its_own_is_written(replayed: Path, tmp_path: Path) -> None:
    done = _feed("--from", str(replayed), "--output-dir", "site", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert not any(SECRET in p.read_text() for p in (tmp_path / "site").iterdir())


def test_head_answers_the_length_get_sends(tmp_path: Path) -> None:
    (tmp_path / "releases.jsonl").write_text(_lines([_release(1, 5)]))
    feed = Served("--from", str(tmp_path))
    try:
        for name in ("", "feed.json", "releases.csv", "nothing-here"):
            get = urllib.request.Request(feed.url + name)
            head = urllib.request.Request(feed.url + name, method="HEAD")
            lengths = []
            for request in (get, head):
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        lengths.append((int(response.headers["Content-Length"]), response.read()))
                except urllib.error.HTTPError as error:
                    lengths.append((int(error.headers["Content-Length"]), error.read()))
                    error.close()
            (get_length, body), (head_length, nothing) = lengths
            assert get_length == len(body) > 0, name
            assert head_length == get_length, name
            assert nothing == b"", name
    finally:
        feed.stop()


def test_missing_topics_are_named_in_words() -> None:
    from streamdp.feed.sources import not_there

    assert not_there(["ns.releases"]) == "topic ns.releases does not exist"
    assert not_there(["ns.consistent", "ns.releases"]) == (
        "topics ns.consistent and ns.releases do not exist"
    )


def test_downloads_say_which_share_of_the_budget_a_weighted_counter_spent() -> None:
    """A stream with budget groups (census attribute weights 1, 1, 2, 4, 8): each row of
    releases.csv names the counter's group and its share, as its release record does; a stream
    without groups leaves both cells empty."""
    from streamdp.engine import Engine
    from streamdp.engine.records import ReleaseRecord
    from streamdp.feed.records import parse_release
    from streamdp.noise import InsecureSeededSampler
    from streamdp.synth import generate, release_instant
    from tests.census_fixture import weighted_census_spec

    spec = weighted_census_spec()
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    for line in generate("census", 1, 20.0, spec=spec):
        engine.ingest(line.text.encode())
    records = [
        json.loads(r.to_json())
        for r in engine.advance_clock(release_instant(spec, 1))
        if isinstance(r, ReleaseRecord)
    ]
    rows = list(csv.DictReader(io.StringIO(to_csv(
        [parse_release(r).row() for r in records], RELEASE_COLUMNS  # type: ignore[union-attr]
    ))))  # fmt: skip
    shares = set()
    for record, row in zip(records, rows, strict=True):
        group = record["budget_group"]
        assert row["budget_group"] == group["name"]
        assert float(row["budget_share"]) == group["share"]
        shares.add(group["share"])
    assert len(shares) == 4  # total and sex share 1/16 each, race 2/16, age 4/16, cells 8/16
    plain = parse_release(_release(1, 5))
    assert plain is not None
    assert plain.row()["budget_group"] is None
    assert plain.row()["budget_share"] is None


def test_the_first_release_of_a_key_is_kept_and_a_differing_one_counted() -> None:
    """The worker re-publishes a release with the same values; a record of the same key with
    other values (forged, or from another deployment on the topic) is not shown: the first is
    kept, as docs/consuming.md advises every consumer, and the other counted as ignored (audit
    of 2026-11-28: the feed kept the latest, so a forged noisy_count of 999999 replaced the
    original)."""
    view = FeedView()
    first = _release(1, 14)
    view.add(first, "release")
    view.add(dict(first), "release")  # the worker's re-publication: the same values
    assert view.ignored_by_reason == {}
    view.add({**first, "noisy_count": 999_999}, "release")
    (kept,) = view.releases.values()
    assert kept.noisy_count == 14
    assert view.ignored_by_reason == {CONFLICTING_REPUBLICATION: 1}


def _mistyped_variants() -> list[tuple[str, dict[str, Any]]]:
    """(what was broken, the record) for each optional field of the schema's examples present
    but not as the schema defines it."""
    examples = json.loads((EXAMPLES / "release.json").read_text())
    places, zcdp, unit = examples[1], examples[2], examples[3]
    assert "place" in places
    assert "rho" in zcdp
    assert "privacy_unit" in unit
    return [
        ("rho as text", {**zcdp, "rho": "0.5"}),
        ("rho without its definition",
         {k: v for k, v in zcdp.items() if k != "privacy_definition"}),
        ("another definition", {**zcdp, "privacy_definition": "approx"}),
        ("delta of 1", {**zcdp, "privacy_delta": 1}),
        ("no l2 bound", {k: v for k, v in zcdp.items() if k != "l2_sensitivity"}),
        ("unit bound as text", {**unit, "privacy_unit": {**unit["privacy_unit"],
                                                         "max_events_per_period": "1"}}),
        ("unit as text", {**unit, "privacy_unit": "patient_id"}),
        ("place without level", {**places, "place": {**places["place"], "level": None}}),
        ("cell as a number", {**places, "cell": 3}),
        ("cell without place", {**examples[0], "cell": "sex=female"}),
        ("group share over 1", {**examples[0], "budget_group": {"name": "a", "share": 1.5,
                                                               "epsilon": 1}}),
        ("group as text", {**examples[0], "budget_group": "a"}),
    ]  # fmt: skip


@pytest.mark.parametrize("broken", _mistyped_variants(), ids=lambda case: case[0])
def test_a_present_but_mistyped_privacy_field_hides_the_record(
    broken: tuple[str, dict[str, Any]],
) -> None:
    """An audit found a zCDP release with ``"rho": "0.5"`` shown as a pure-epsilon stream, and
    a unit bound given as text shown as per-event protection: an optional field that is present
    but malformed dropped silently. Such a record would state the wrong guarantee, so it is not
    shown and is counted like any other mistyped record."""
    view = FeedView()
    view.add(broken[1], "release")
    assert view.releases == {}
    assert view.ignored_by_reason == {"missing or mistyped field": 1}


def test_the_schema_examples_with_every_optional_field_are_shown() -> None:
    """The other side of the check above: the well-formed records of each kind are shown."""
    view = FeedView()
    examples = json.loads((EXAMPLES / "release.json").read_text())
    for record in examples:
        view.add(record, "release")
    assert view.ignored_by_reason == {}
    assert len(view.releases) == len(examples)
    shown = list(view.releases.values())
    assert shown[2].rho == 0.5
    assert shown[2].l2_sensitivity == examples[2]["l2_sensitivity"]
    assert shown[3].unit_bounds == (2, 6)
    assert shown[1].cell == "sex=female"
