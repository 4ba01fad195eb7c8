"""A replay's protected files (dead letters, snapshot, ledger) are readable by their owner only,
and the output directory it creates is its owner's alone; the public files keep the umask's
mode (security audit of 2026-11-28: under umask 022 the snapshot's open-period counts and the
dead letters' raw records were readable by every user of the machine)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamdp.engine.replay import replay
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_022")
def test_protected_files_are_the_owners_alone(tmp_path: Path) -> None:
    spec = example_spec("hiv")
    events = tmp_path / "events.jsonl"
    lines = [line.text for line in generate("hiv", periods=3, rate=20, seed=4)]
    events.write_text("\n".join([*lines, "not json"]) + "\n", encoding="utf-8")
    out = tmp_path / "new" / "out"
    replay(spec, events, out, as_of=release_instant(spec, 2), sampler=InsecureSeededSampler(3))
    assert (out / "dead_letter.jsonl").stat().st_size > 0  # it holds a raw record
    for name in ("dead_letter.jsonl", "snapshot.json", "ledger.jsonl"):
        assert _mode(out / name) == 0o600, name
    assert _mode(out) == 0o700
    for name in ("releases.jsonl", "consistent.jsonl"):
        assert _mode(out / name) == 0o644, name  # public: the umask decides


@pytest.mark.usefixtures("umask_022")
def test_a_directory_the_operator_made_keeps_its_mode(tmp_path: Path) -> None:
    spec = example_spec("hiv")
    events = tmp_path / "events.jsonl"
    events.write_text("", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir(mode=0o750)
    replay(spec, events, out, as_of=release_instant(spec, 1), sampler=InsecureSeededSampler(3))
    assert _mode(out) == 0o750
    assert _mode(out / "snapshot.json") == 0o600
