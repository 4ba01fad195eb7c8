"""``synth`` prints an instant that releases every period it generated, in every stream of its
spec, and refuses periods no stream would count (an audit of 2026-11-28: the hospital spec's
monthly stream still had January open at the printed instant; hiv's stopping stream refused
80 of 200 generated periods that synth had counted as good; periods past the year 9000 were
piled into its last instant)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streamdp.cli import main
from streamdp.engine.periods import parse_instant
from streamdp.synth import example_spec, release_instant
from streamdp.synth.generators import full_release_instant


def _synth(scenario: str, periods: int, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["synth", "--scenario", scenario, "--periods", str(periods), "--rate", "30",
            "--output", str(out)]  # fmt: skip
    assert main(argv) == 0
    found = re.search(r"--as-of (\S+)", capsys.readouterr().err)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("scenario", ["hospital", "hospital-patients"])
def test_the_printed_instant_releases_every_stream_of_a_mixed_spec(
    scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    as_of = _synth(scenario, 10, events, capsys)
    spec = example_spec(scenario)
    assert parse_instant(as_of) == full_release_instant(spec, 10) > release_instant(spec, 10)
    argv = ["replay", "--config", f"streamdp/examples/{scenario.replace('-', '_')}.toml",
            "--input", str(events), "--output-dir", str(tmp_path / "out"), "--as-of", as_of,
            "--insecure-seed", "1"]  # fmt: skip
    if scenario == "hospital-patients":
        key = tmp_path / "unit.key"
        key.write_bytes(bytes(range(32)))
        key.chmod(0o600)
        argv += ["--unit-key-file", str(key)]
    assert main(argv) == 0
    released = [
        json.loads(line) for line in (tmp_path / "out" / "releases.jsonl").read_text().splitlines()
    ]
    for name in spec.streams:  # every stream released the periods holding the events
        periods = {r["period"] for r in released if r["stream"] == name}
        assert periods, name
    times = [
        parse_instant(json.loads(line)["event_time"])
        for line in events.read_text().split("\n")
        if line.startswith("{")
    ]
    monthly = [n for n, s in spec.streams.items() if s.period.unit == "month"]
    assert monthly
    for name in monthly:  # January (period 1) is out, with every January event in it
        assert 1 in {r["period"] for r in released if r["stream"] == name}
    assert max(t for t in times if t is not None) < parse_instant(as_of)


def test_a_single_stream_spec_prints_the_same_instant_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_of = _synth("restaurant", 5, tmp_path / "events.jsonl", capsys)
    assert parse_instant(as_of) == release_instant(example_spec("restaurant"), 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "hiv", "--periods", "200"],
         "--periods 200 runs past the horizon of stream 'hiv-monthly', which stops there"),
        (["--scenario", "census", "--periods", "100000"],
         "--periods 100000 runs past 9000-01-01T00:00:00Z"),
        (["--scenario", "restaurant", "--periods", "100000000"],
         "--periods 100000000 runs past 9000-01-01T00:00:00Z"),
    ],
)  # fmt: skip
def test_periods_no_stream_would_count_are_refused_and_nothing_is_written(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "events.jsonl"
    assert main(["synth", *argv, "--rate", "0.01", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["synth", "--scenario", "hiv", "--periods", "120", "--rate", "0.01",
                 "--output", str(out)]) == 0  # fmt: skip
