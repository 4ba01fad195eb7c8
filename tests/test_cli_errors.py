"""Commands answer bad input with one line and exit status 2, never a traceback (issue 14)."""

from __future__ import annotations

import pytest

from streamdp.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plan", "--mechanism", "binary", "--objective", "minimax", "--horizon", "10",
             "--epsilon", "1", "--sensitivity", "1"],
            "--objective minimax does not apply to --mechanism binary",
        ),
        (
            ["plan", "--mechanism", "naive", "--objective", "count", "--horizon", "10",
             "--sensitivity", "1", "--epsilon", "1"],
            "--objective count does not apply to --mechanism naive (its weights are fixed)",
        ),
        (
            ["plan", "--mechanism", "fda", "--objective", "count", "--horizon", "10",
             "--sensitivity", "1", "--epsilon", "1"],
            "--objective count does not apply to --mechanism fda; it takes total or minimax",
        ),
        (["plan", "--epsilon", "1"], "--horizon is required (or --config SPEC.toml"),
        (["plan", "--horizon", "10", "--epsilon", "1"], "--sensitivity is required: the most"),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1"],
            "--epsilon is required (or --target-std COUNTS",
        ),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1", "--epsilon", "1",
             "--target-std", "3"],
            "--target-std finds the epsilon; drop --epsilon",
        ),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1", "--target-std", "-3"],
            "the target standard deviation must be a number > 0, got -3.0",
        ),
        (
            ["plan", "--config", "streamdp/examples/demo.toml", "--horizon", "10"],
            "--config plans each stream with the spec's own values; drop --horizon",
        ),
        (
            ["plan", "--config", "/nonexistent/spec.toml"],
            "cannot read configuration '/nonexistent/spec.toml'",
        ),
        (
            ["synth", "--scenario", "hiv", "--periods", "2", "--rate", "1", "--output",
             "/nonexistent/dir/x.jsonl"],
            "directory '/nonexistent/dir' does not exist",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--output-dir", "out", "--as-of", "yesterday"],
            "--as-of 'yesterday' is not an instant",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--output-dir", "out"],
            "the instant it printed ('every generated period is released by:",
        ),
        (
            ["produce", "--scenario", "hiv", "--write-spec", "live.toml", "--bootstrap",
             "127.0.0.1:9092"],
            "--write-spec writes a spec and exits without sending anything: drop --bootstrap",
        ),
    ],
)  # fmt: skip
def test_bad_arguments_give_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
