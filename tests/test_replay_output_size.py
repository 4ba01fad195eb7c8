"""Issue 14's measure of consumer-ready outputs: a census replay of 366 periods writes
consistent output no larger than its releases, one consistent record per period.

Before revisions published only new periods, every revision re-published all periods: the
366-month census replay wrote 788 MB of consistent records against 62 MB of releases. The sizes
depend on the number of periods and counters, not on the event rate, so a low rate keeps this
fast (the full-rate figure is in the README: 25.4 MB against 62.6 MB).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from streamdp.engine.replay import read_jsonl, replay
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant

PERIODS = 366


def test_a_366_period_census_replay_writes_no_more_consistent_bytes_than_releases(
    tmp_path: Path,
) -> None:
    spec = example_spec("census")
    events = tmp_path / "events.jsonl"
    lines = [line.text for line in generate("census", PERIODS, 3, seed=4, spec=spec)]
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    summary = replay(
        spec,
        events,
        out,
        as_of=release_instant(spec, PERIODS),
        sampler=InsecureSeededSampler(4),
    )
    assert summary.periods_released == {"census": PERIODS}
    assert summary.revisions["census"] > 100  # every 3 periods: the repeats would add up
    consistent_bytes = (out / "consistent.jsonl").stat().st_size
    release_bytes = (out / "releases.jsonl").stat().st_size
    assert 0 < consistent_bytes <= release_bytes
    periods = Counter((r["epoch"], r["period"]) for r in read_jsonl(out / "consistent.jsonl"))
    assert len(periods) == PERIODS
    assert set(periods.values()) == {1}, "a period's consistent value was published twice"
