"""The temporary accuracy demo runs and labels its insecure sampler."""

from __future__ import annotations

from streamdp.cli import main


def test_demo_runs_and_says_it_is_insecure_and_temporary(capsys) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "INSECURE" in out
    assert "Kafka demo will replace" in out
    assert "HIV" in out
