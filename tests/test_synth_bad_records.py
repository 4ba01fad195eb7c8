"""Every bad record `streamdp synth` writes is refused by every stream when its file is replayed
at the instant synth prints (audit item 2: "too_far_in_future" records used to be dated 200
periods ahead, inside a 365-day replay, and were counted)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from streamdp.cli import main
from streamdp.engine.replay import read_jsonl
from streamdp.synth import SCENARIOS, example_spec, generate
from streamdp.synth.generators import EXAMPLE_FILES

PERIODS = 365  # the README's replay: a year of days (thirty years of months)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_bad_record_synth_writes_is_refused_by_the_replay_of_its_file(
    scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    rate = 0.3 if scenario == "county-admissions" else 1.0
    # hiv's stream stops after its horizon of 120 months: synth refuses periods past it
    periods = 120 if scenario == "hiv" else PERIODS
    synth = ["synth", "--scenario", scenario, "--periods", str(periods), "--rate", str(rate)]
    assert main([*synth, "--output", str(events), "--bad-fraction", "0.5"]) == 0
    printed = re.search(r"--as-of (\S+)", capsys.readouterr().err)
    assert printed is not None
    out = tmp_path / "out"
    config = f"streamdp/examples/{EXAMPLE_FILES[scenario]}"
    replay = ["replay", "--config", config, "--input", str(events), "--output-dir", str(out)]
    assert main([*replay, "--as-of", printed.group(1), "--insecure-seed", "1"]) == 0

    lines = list(generate(scenario, periods, rate, bad_fraction=0.5))
    assert [line.text for line in lines] == events.read_text().splitlines()
    # dated past the future limit: refused as too far ahead, or past a stopping stream's horizon
    assert any(line.expect in {"too_far_in_future", "after_horizon"} for line in lines)
    refused: dict[int, set[str | None]] = defaultdict(set)
    for letter in read_jsonl(out / "dead_letter.jsonl"):
        refused[letter["offset"]].add(letter["stream"])
    spec = example_spec(scenario)
    for number, line in enumerate(lines, start=1):
        if line.expect is None:  # (a good event past a stopping stream's horizon is refused)
            continue
        # refused before any stream (None) or by every stream reading the record's source
        by = refused[number]
        if None not in by:
            source = json.loads(line.text)["source"]
            readers = {n for n, s in spec.streams.items() if spec.sources[s.source].topic == source}
            if line.expect == "duplicate_event":
                # a copy of an event a privacy unit's bounds dropped is dropped again, silently
                readers -= {n for n in readers - by if spec.streams[n].privacy_unit is not None}
            assert by == readers, (line.expect, line.text)
