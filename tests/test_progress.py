"""Progress of long commands goes to stderr only: stdout and the files written are the same
with and without it (issue 14: synth ran 30 s without a word)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from streamdp.cli import main
from streamdp.progress import ProgressLine, progress_stream


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_is_throttled_by_its_clock_and_off_unless_asked() -> None:
    clock = FakeClock()
    log = io.StringIO()  # not a terminal
    quiet = ProgressLine("job", 10, "periods", stream=log, clock=clock)
    quiet.update(3)
    quiet.finish(10)
    assert log.getvalue() == ""
    shown = ProgressLine("job", 10, "periods", forced=True, stream=log, clock=clock, interval=1.0)
    shown.update(1, "5 records")
    clock.now = 0.5
    shown.update(2)  # within the interval: not drawn
    clock.now = 1.5
    shown.update(3)
    shown.finish(10)
    assert log.getvalue().splitlines() == [
        "job: 1/10 periods (10%), 5 records",
        "job: 3/10 periods (30%)",
        "job: 10/10 periods (100%)",
    ]


def test_forced_stream_turns_carriage_returns_into_lines() -> None:
    log = io.StringIO()
    stream = progress_stream(True, log)
    assert stream.isatty()
    stream.write("\r[##--] 50%")
    stream.write("\r[####] 100%")
    assert log.getvalue() == "\n[##--] 50%\n[####] 100%"
    assert progress_stream(False, log) is log


def _synth(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return [
        "synth", "--scenario", "census", "--periods", "24", "--rate", "1000",
        "--output", str(tmp_path / name), "--data-seed", "7", *extra,
    ]  # fmt: skip


def test_synth_progress_leaves_stdout_and_the_file_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_synth(tmp_path, "plain.jsonl")) == 0
    plain = capsys.readouterr()
    assert main(_synth(tmp_path, "progress.jsonl", "--progress")) == 0
    shown = capsys.readouterr()
    assert plain.out == shown.out == ""
    assert (tmp_path / "plain.jsonl").read_bytes() == (tmp_path / "progress.jsonl").read_bytes()
    assert "streamdp synth:" not in plain.err
    progress = [line for line in shown.err.splitlines() if line.startswith("streamdp synth:")]
    assert progress[-1].startswith("streamdp synth: 24/24 periods (100%)")
    assert len(progress) >= 2


def test_replay_progress_leaves_stdout_and_the_outputs_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_synth(tmp_path, "events.jsonl")) == 0
    assert (tmp_path / "events.jsonl").stat().st_size > 1_000_000  # replay draws above 1 MB
    capsys.readouterr()
    runs = {}
    for name, extra in (("plain", []), ("progress", ["--progress"])):
        argv = [
            "replay", "--config", "streamdp/examples/census.toml",
            "--input", str(tmp_path / "events.jsonl"), "--output-dir", str(tmp_path / name),
            "--as-of", "2030-01-01T00:00:00Z", "--insecure-seed", "3", *extra,
        ]  # fmt: skip
        assert main(argv) == 0
        runs[name] = capsys.readouterr()

    def stable(out: str) -> list[str]:
        return [line for line in out.splitlines() if not line.startswith("replayed in ")]

    assert stable(runs["plain"].out) == stable(runs["progress"].out)
    assert "%" not in runs["progress"].out
    for output in ("releases.jsonl", "consistent.jsonl"):
        assert (tmp_path / "plain" / output).read_bytes() == (
            tmp_path / "progress" / output
        ).read_bytes()
    assert "%" not in runs["plain"].err
    assert "%" in runs["progress"].err
