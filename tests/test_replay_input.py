"""A replay refuses an input that is not JSON Lines before it spends any budget, and reads a file
that starts with a UTF-8 byte-order mark like the same file without it (audit item 1)."""

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


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "holds no records (it is empty)"),
        (b"\n  \n\r\n", "holds no records (it is empty)"),
        (b"\xef\xbb\xbf", "holds no records (it is empty)"),
        (b"event_id,time,hiv_positive\n1,2024-01-02,true\n", "is not JSON Lines"),
        (b'[{"event_id": "a"}]\n', "is not JSON Lines"),
        (b"\xff\xfe{\x00}\x00\n", "is not JSON Lines"),
        (b'\n\n"just a string"\n{"event_id": "a"}\n', "is not JSON Lines"),
    ],
)
def test_an_input_that_is_not_json_lines_is_refused_before_any_spend(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.txt"
    events.write_bytes(content)
    out = tmp_path / "out"
    assert _replay(events, out) == 2
    err = capsys.readouterr().err
    assert message in err
    assert str(events) in err
    assert "one JSON object per line" in err
    assert len(err.strip().splitlines()) == 2  # the insecure-seed warning, then the error
    assert not (out / "ledger.jsonl").exists()
    assert not (out / "releases.jsonl").exists()


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
