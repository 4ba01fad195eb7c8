"""The ``hospital-patients`` synthetic scenario (issue 28): returning patients with a
heavy-tailed number of admissions, read by the example spec that protects the patient."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

from streamdp.engine.replay import read_jsonl, replay
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant


def _admissions(periods: int, rate: float, seed: int) -> list[dict[str, object]]:
    spec = example_spec("hospital-patients")
    return [
        json.loads(line.text)
        for line in generate("hospital-patients", periods, rate, seed=seed, spec=spec)
    ]


def test_the_scenario_is_deterministic_and_every_admission_names_its_patient() -> None:
    first, again = _admissions(30, 20.0, 4), _admissions(30, 20.0, 4)
    assert first == again
    assert first != _admissions(30, 20.0, 5)
    assert all(isinstance(e["patient_id"], str) and e["patient_id"] for e in first)


def test_admissions_per_patient_are_heavy_tailed_and_patients_keep_their_attributes() -> None:
    events = _admissions(365, 40.0, 3)
    visits = Counter(str(e["patient_id"]) for e in events)
    counts = sorted(visits.values())
    assert statistics.median(counts) <= 2
    assert counts[-1] >= 50  # some patients are admitted dozens of times
    assert sum(1 for c in counts if c >= 50) >= 3
    assert counts[-1] < len(events) / 20  # no single patient dominates
    kept: dict[str, tuple[object, object, object]] = {}
    for event in events:
        attrs = event["attributes"]
        assert isinstance(attrs, dict)
        mine = (attrs["sex"], attrs["age"], attrs["hiv_positive"])
        assert kept.setdefault(str(event["patient_id"]), mine) == mine


def test_the_patient_example_replays_and_its_bounds_drop_heavy_patients(tmp_path: Path) -> None:
    spec = example_spec("hospital-patients")
    path = tmp_path / "events.jsonl"
    lines = list(generate("hospital-patients", 60, 40.0, seed=2, spec=spec))
    path.write_text("".join(line.text + "\n" for line in lines), encoding="utf-8")
    summary = replay(
        spec,
        path,
        tmp_path / "out",
        as_of=release_instant(spec, 60),
        sampler=InsecureSeededSampler(1),
    )
    assert summary.accepted > 0
    assert summary.dropped_over_unit_bound["admissions-census"] > 0  # the heavy patients
    assert summary.protects["hiv-admissions"] == "patient_id per epoch"
    releases = read_jsonl(tmp_path / "out" / "releases.jsonl")
    census = [r for r in releases if r["stream"] == "admissions-census"]
    assert census
    assert {r["sensitivity"] for r in census} == {60}
    assert not read_jsonl(tmp_path / "out" / "dead_letter.jsonl")


def test_synth_writes_the_scenario_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "patients.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", "synth", "--scenario", "hospital-patients",
         "--periods", "5", "--rate", "10", "--output", str(out)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all("patient_id" in json.loads(line) for line in out.read_text().splitlines())
