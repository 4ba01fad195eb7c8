"""A replay refuses an input named as another format before it spends any budget, never decides
from a record whether to run, checks a file on request without spending, and reads a file that
starts with a UTF-8 byte-order mark like the same file without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamdp.cli import main
from streamdp.engine.periods import format_instant
from streamdp.engine.replay import read_jsonl
from streamdp.synth import example_spec, generate, release_instant

SPEC = "streamdp/examples/hiv.toml"


def _replay(events: Path, out: Path, as_of: str = "2024-06-01T00:00:00Z") -> int:
    return main(
        [
            "replay",
            "--config",
            SPEC,
            "--input",
            str(events),
            "--output-dir",
            str(out),
            "--insecure-seed",
            "3",
            "--as-of",
            as_of,
        ]
    )


@pytest.mark.parametrize("name", ["events.csv", "events.TSV", "spec.toml", "events.jsonl.gz"])
def test_a_file_named_as_another_format_is_refused_before_any_spend(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal reads the name (the operator's choice), never a record: valid JSON Lines
    named .csv is refused all the same."""
    events = tmp_path / name
    events.write_text("\n".join(line.text for line in generate("hiv", 2, 5)) + "\n")
    out = tmp_path / "out"
    assert _replay(events, out) == 2
    err = capsys.readouterr().err
    assert f"--input {str(events)!r} is named as" in err
    assert "not JSON Lines" in err
    assert "--check-input" in err
    assert len(err.strip().splitlines()) == 2  # the insecure-seed warning, then the error
    assert not (out / "ledger.jsonl").exists()
    assert not (out / "releases.jsonl").exists()


VALID = [line.text.encode() for line in generate("hiv", periods=3, rate=20, seed=4)]
CSV = [b"event_id,time,hiv_positive", b"1,2024-01-02,true"]
HOSTILE_FIRST_LINES = {
    "a CSV header": b"event_id,time,hiv_positive",
    "a JSON array": b'[{"event_id": "a"}]',
    "a JSON string": b'"just a string"',
    "nesting past the parser": b"[" * 200_000,
    "a line longer than a record may be": b'{"event_id": "' + b"x" * 100_000 + b'"}',
    "a valid event": VALID[0],
}


@pytest.mark.parametrize("base", ["empty", "csv", "valid"])
@pytest.mark.parametrize("hostile", sorted(HOSTILE_FIRST_LINES))
def test_whether_a_replay_publishes_never_depends_on_one_record(
    base: str, hostile: str, tmp_path: Path
) -> None:
    """Audit of 2026-11-28: the first non-blank line decided whether the whole file was refused
    (exit 2, nothing published) or replayed, so one record put first switched every release on
    or off. D and D plus one record r put first, same seeded noise: both are replayed and
    publish the same releases (the same bytes when r is not a valid event, which is
    dead-lettered; the same keys when it is one)."""
    lines = {"empty": [], "csv": CSV, "valid": VALID[1:]}[base]
    as_of = format_instant(release_instant(example_spec("hiv"), 3))
    outputs = []
    for name, content in (("d", lines), ("d_plus_r", [HOSTILE_FIRST_LINES[hostile], *lines])):
        events = tmp_path / f"{name}.jsonl"
        events.write_bytes(b"".join(line + b"\n" for line in content))
        assert _replay(events, tmp_path / name, as_of) == 0
        outputs.append(read_jsonl(tmp_path / name / "releases.jsonl"))
    without, with_r = outputs
    assert len(without) == 3  # every due month is released, from noise alone if need be
    if hostile == "a valid event":
        assert [r["key"] for r in with_r] == [r["key"] for r in without]
    else:
        assert with_r == without


def test_check_input_says_what_a_replay_would_count_and_spends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_of = format_instant(release_instant(example_spec("hiv"), 3))
    csv = tmp_path / "events.txt"
    csv.write_bytes(b"".join(line + b"\n" for line in CSV))
    valid = tmp_path / "events.jsonl"
    valid.write_bytes(b"".join(line + b"\n" for line in VALID))
    argv = ["replay", "--config", SPEC, "--as-of", as_of, "--check-input"]
    assert main([*argv, "--input", str(csv)]) == 0
    shown = capsys.readouterr().out
    assert "lines read: 2" in shown
    assert "events a replay would count: 0" in shown
    assert "looks wrong: its first non-blank line is not a JSON object" in shown
    assert "no event would count" in shown
    assert main([*argv, "--input", str(valid)]) == 0
    shown = capsys.readouterr().out
    assert "looks wrong" not in shown
    # the check counts what the replay counts
    assert (
        main(
            [
                *argv[:-1],
                "--input",
                str(valid),
                "--output-dir",
                str(tmp_path / "out"),
                "--show-counts",
            ]
        )
        == 0
    )
    replayed = capsys.readouterr().out
    counted = [line for line in shown.splitlines() if line.startswith("events a replay")]
    accepted = [line for line in replayed.splitlines() if line.startswith("events accepted")]
    assert counted[0].split(": ")[1] == accepted[0].split(": ")[1] != "0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "events.txt", "out"]


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    spec = example_spec("hiv")
    lines = [line.text for line in generate("hiv", periods=3, rate=20, seed=4)]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    as_of = format_instant(release_instant(spec, 3))
    for events in (plain, marked):
        assert _replay(events, tmp_path / events.stem, as_of) == 0
    assert read_jsonl(tmp_path / "marked" / "dead_letter.jsonl") == []
    assert read_jsonl(tmp_path / "marked" / "releases.jsonl") == read_jsonl(
        tmp_path / "plain" / "releases.jsonl"
    )


@pytest.mark.parametrize(
    ("as_of", "epochs"), [("2024-02-01T00:00:00Z", 1), ("2032-01-01T00:00:00Z", 8)]
)
def test_the_summary_counts_epochs_and_warns_when_as_of_releases_several(
    as_of: str, epochs: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """restaurant.toml rolls into a new epoch every 366 days, so an --as-of eight years on
    releases eight epochs, each spending epsilon 1.0 (the count depends on the spec and the
    instant only: public)."""
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(line.text for line in generate("restaurant", 3, 5)) + "\n")
    argv = ["replay", "--config", "streamdp/examples/restaurant.toml", "--input", str(events)]
    assert main([*argv, "--output-dir", str(tmp_path / "out"), "--as-of", as_of]) == 0
    captured = capsys.readouterr()
    assert f"in {epochs} epoch(s); epsilon summed over the epochs: {epochs}.0" in captured.out
    warned = [line for line in captured.err.splitlines() if "epochs of stream" in line]
    if epochs == 1:
        assert warned == []
    else:
        assert len(warned) == 1
        assert f"--as-of {as_of} releases {epochs} epochs of stream 'restaurant-items'" in warned[0]
        assert f"epsilon {epochs}.0 summed over them" in warned[0]


def test_a_second_replay_into_the_same_directory_is_refused_and_says_a_new_one_spends_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit found the refusal advising "use a new --output-dir", the very step that releases
    the same events twice (a new directory starts an empty ledger). The message now says so."""
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(line.text for line in generate("hiv", 2, 5)) + "\n")
    assert _replay(events, tmp_path / "out") == 0
    capsys.readouterr()
    ledger = (tmp_path / "out" / "ledger.jsonl").read_bytes()
    assert _replay(events, tmp_path / "out") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds an earlier release" in err
    assert "a second release whose loss adds to this one's" in err
    assert "never published" in err
    assert (tmp_path / "out" / "ledger.jsonl").read_bytes() == ledger  # nothing spent again


@pytest.mark.parametrize(
    ("present", "message"),
    [
        ("index.html", "holds a feed site (index.html): a replay writes protected files"),
        ("feed.json", "holds a feed site (feed.json)"),
        ("releases.jsonl", "already holds releases.jsonl of an earlier replay"),
        ("dead_letter.jsonl", "already holds dead_letter.jsonl of an earlier replay"),
    ],
)
def test_a_directory_holding_a_site_or_an_earlier_replays_files_is_refused(
    present: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit replayed into a published feed site (the ledger, snapshot and dead letters, all
    protected, landed beside index.html) and over an earlier replay's releases.jsonl (only the
    ledger was guarded). Both are refused before anything is written."""
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(line.text for line in generate("hiv", 2, 5)) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / present).write_text("kept\n")
    assert _replay(events, out) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [present]
    assert (out / present).read_text() == "kept\n"
