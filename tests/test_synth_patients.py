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


def test_the_plain_hospital_example_accepts_every_admission_and_ignores_the_patient_id(
    tmp_path: Path,
) -> None:
    """hospital.toml has no privacy unit: the extra ``patient_id`` field is not refused, every
    admission is counted once, as for the ``hospital`` scenario's events."""
    spec = example_spec("hospital")
    path = tmp_path / "events.jsonl"
    lines = list(generate("hospital-patients", 20, 30.0, seed=2, spec=spec))
    assert all("patient_id" in json.loads(line.text) for line in lines)
    path.write_text("".join(line.text + "\n" for line in lines), encoding="utf-8")
    summary = replay(
        spec,
        path,
        tmp_path / "out",
        as_of=release_instant(spec, 20),
        sampler=InsecureSeededSampler(1),
    )
    assert summary.accepted == len(lines)
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


def test_the_patient_example_runs_in_the_release_service_as_in_the_replay(tmp_path: Path) -> None:
    """The daemon's release service over a state table, records arriving a minute after they
    happened, publishes exactly the replay's releases (same seeded noise, same admissions)."""
    from collections import defaultdict

    from streamdp.daemon.routing import InputRecord
    from streamdp.daemon.service import ReleaseService
    from streamdp.engine.periods import parse_instant

    spec = example_spec("hospital-patients")
    periods = 40
    lines = [line.text for line in generate("hospital-patients", periods, 30.0, seed=6, spec=spec)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    as_of = release_instant(spec, periods)
    replay(spec, path, tmp_path / "out", as_of=as_of, sampler=InsecureSeededSampler(8))
    expected = {r["key"]: r for r in read_jsonl(tmp_path / "out" / "releases.jsonl")}
    window = 3600.0
    batches: dict[int, list[InputRecord]] = defaultdict(list)
    for offset, text in enumerate(lines):
        arrival = (parse_instant(json.loads(text)["event_time"]) or 0.0) + 60.0
        batches[int(arrival // window)].append(
            InputRecord("hospital-admissions", 0, offset, b"hospital-admissions", text.encode())
        )
    now = [0.0]
    service = ReleaseService(
        spec,
        sampler=InsecureSeededSampler(8),
        state={},
        clock=lambda: now[0],
        unit_key=b"release-service-test-key-0123456",
    )
    published = {}
    for hour in sorted(batches):
        now[0] = (hour + 1) * window
        for outcome in (service.process(batches[hour]), service.tick()):
            for p in outcome.publications:
                record = json.loads(p.value)
                if record["kind"] == "release":
                    published[record["key"]] = record
    now[0] = as_of
    while True:
        for p in service.tick().publications:
            record = json.loads(p.value)
            if record["kind"] == "release":
                published[record["key"]] = record
        if not service.due():
            break
    assert expected
    assert published == expected
