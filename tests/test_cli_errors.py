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
            ["synth", "--scenario", "hiv", "--periods", "2", "--rate", "1", "--output",
             "/nonexistent/dir/x.jsonl"],
            "directory '/nonexistent/dir' does not exist",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--output-dir", "out", "--as-of", "yesterday"],
            "--as-of 'yesterday' is not an instant",
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
