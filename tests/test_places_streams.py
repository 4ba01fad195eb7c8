"""Places streams through the engine (issue 29): the county example replays, its consistent
values sum up the tree, their declared errors hold in simulation, and the daemon's release
service publishes exactly the replay's records.

- ``county_admissions.toml`` (3,194 places x 2 sexes) replays a week and a day of synthetic
  admissions: every consistent count and running total of every place equals the sum of its
  children's to 1e-6, in every cell; each consistent value declares ``sqrt(P_jj)`` times its
  release's standard deviation; releases stay integers.
- the power of the neighbour check (``test_privacy_neighbours.py`` runs the hostile records):
  one more admission moves the running totals by exactly 3 (its county, its state, the
  nation), two admissions by 6.
- the declared standard deviations of the consistent values hold over 4,000 noise draws (a
  chi-square bound at p = 1e-6 per group of places, with a power check: stds 30% off fail).
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine import Engine, EngineSpec
from streamdp.engine.periods import parse_instant
from streamdp.engine.records import ConsistentRecord
from streamdp.engine.replay import read_jsonl, replay
from streamdp.kinds import stream_kind
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant
from tests.places_fixture import merged_parts, small_county_spec, tree_gap


def _replayed(spec: EngineSpec, lines: list[str], periods: int, tmp: Path, seed: int) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "events.jsonl"
    path.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    replay(
        spec,
        path,
        tmp / "out",
        as_of=release_instant(spec, periods),
        sampler=InsecureSeededSampler(seed),
    )
    return tmp / "out"


def test_the_county_example_replays_and_its_consistent_values_sum_up_the_tree(
    tmp_path: Path,
) -> None:
    spec = example_spec("county-admissions")
    periods = 8
    lines = [line.text for line in generate("county-admissions", periods, 300.0, seed=4)]
    out = _replayed(spec, lines, periods, tmp_path, seed=9)
    assert not read_jsonl(out / "dead_letter.jsonl")
    releases = read_jsonl(out / "releases.jsonl")
    stream = spec.streams["admissions-by-county"]
    assert len(releases) == periods * stream.counters.width
    assert all(isinstance(r["noisy_count"], int) for r in releases)
    parts = read_jsonl(out / "consistent.jsonl")
    # 6,388 counters: each period in three records of contiguous counters, under 1 MB each
    assert {(c["part"], c["parts"]) for c in parts} == {(1, 3), (2, 3), (3, 3)}
    assert all(c["key"].endswith(f"|{c['part']}") for c in parts)
    assert max(len(json.dumps(c)) for c in parts) < 500_000
    consistent = merged_parts(parts)
    # revised after a week, and the day after by the replay's closing revision
    assert [(c["revision"], c["period"]) for c in consistent] == [(1, p) for p in range(1, 8)] + [
        (2, 8)
    ]
    for record in consistent:
        assert record["constraint"] == "tree"
        assert tree_gap(spec, record["counts"]) < 1e-6
        assert tree_gap(spec, record["totals"]) < 1e-6
    # declared stds: sqrt(P_jj) times the release's, per counter
    diagonal = stream_kind("places").projection_diagonal(stream)
    first = {r["counter"]: r for r in releases if r["period"] == 1}
    for j, name in enumerate(stream.counters.names):
        expected = np.sqrt(diagonal[j]) * first[name]["count_std"]
        assert consistent[0]["count_std"][name] == pytest.approx(expected, rel=1e-12)
    # every consistent value is more accurate than its release (a wide tree gains little:
    # the nation's 50 states sum to a far noisier estimate than its own node)
    assert all(diagonal < 1.0)
    assert consistent[0]["count_std"]["US/sex=male"] < first["US/sex=male"]["count_std"]


def _with_extra(lines: list[str], pick: int, copies: int) -> list[str]:
    out = list(lines)
    event = json.loads(lines[pick])
    for copy in range(copies):
        out.insert(pick + 1, json.dumps(dict(event, event_id=f"extra-{copy}")))
    return out


@pytest.mark.parametrize("copies", [1, 2])
def test_one_more_admission_moves_the_running_totals_by_exactly_the_levels(
    copies: int, tmp_path: Path
) -> None:
    spec = small_county_spec()
    periods = 4
    lines = [line.text for line in generate("county-admissions", periods, 12.0, seed=3, spec=spec)]
    base = read_jsonl(_replayed(spec, lines, periods, tmp_path / "d", seed=5) / "releases.jsonl")
    other = read_jsonl(
        _replayed(spec, _with_extra(lines, 7, copies), periods, tmp_path / "d1", seed=5)
        / "releases.jsonl"
    )
    assert [r["key"] for r in base] == [r["key"] for r in other]
    moved: dict[int, int] = defaultdict(int)
    for a, b in zip(base, other, strict=True):
        moved[a["period"]] += abs(a["noisy_total"] - b["noisy_total"])
    # 3 levels (county, state, nation), in every period from the record's on
    assert set(moved.values()) <= {0, 3 * copies}
    assert max(moved.values()) == 3 * copies


@functools.cache
def _consistent_draws(draws: int) -> tuple[Any, Any]:
    """Consistent period-2 counts of ``draws`` noise draws with no events (so the values are
    the consistent noise) of the small county spec, and their declared stds."""
    spec = small_county_spec()
    values = []
    declared: dict[str, float] = {}
    for seed in range(draws):
        engine = Engine(spec, sampler=InsecureSeededSampler(10_000 + seed))
        records = engine.advance_clock(release_instant(spec, 2))
        second = next(r for r in records if isinstance(r, ConsistentRecord) and r.period == 2)
        values.append(list(second.counts.values()))
        declared = second.count_std
    return np.asarray(values), np.asarray(list(declared.values()))


@pytest.mark.parametrize(("scale", "holds"), [(1.0, True), (1.3, False), (1 / 1.3, False)])
def test_the_consistent_values_declared_stds_hold_in_simulation(scale: float, holds: bool) -> None:
    """Per level (nation, states, counties), the pooled ratio of the observed to the declared
    variance is within a chi-square bound at p = 1e-6 (counters of a level share their
    variance factor only approximately, so each is normalised by its own declared std); the
    power rows declare stds 30% off and must be rejected."""
    spec = small_county_spec()
    draws = 4000
    values, declared = _consistent_draws(draws)
    declared = declared * scale
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    depth = np.repeat(places.depth, 2)
    verdicts = []
    for level in range(places.levels):
        z = values[:, depth == level] / declared[depth == level]
        # counters of one draw are correlated through the projection: use one counter per
        # place-cell column as its own chi-square test, Bonferroni over the columns
        for column in z.T:
            statistic = float(np.sum(column**2))
            # discrete Laplace has heavy tails: a normal chi-square is too narrow; use the
            # exact variance of the sum of squares via the sample's own fourth moment
            fourth = float(np.mean(column**4))
            spread = np.sqrt(draws * max(fourth - 1.0, 1e-9))
            bound = stats.norm.isf(1e-6 / (2 * z.shape[1])) * spread
            verdicts.append(abs(statistic - draws) <= bound)
    if holds:
        assert all(verdicts)
    else:  # every column rejects the wrong stds
        assert not any(verdicts)


def test_the_county_example_runs_in_the_release_service_as_in_the_replay(tmp_path: Path) -> None:
    """The daemon's release service over a state table (records arriving a minute after they
    happened, in hourly batches; the public clock's timer between them) publishes exactly the
    replay's releases and weekly revision, byte for byte (same seeded noise)."""
    spec = example_spec("county-admissions")
    periods = 8
    lines = [line.text for line in generate("county-admissions", periods, 200.0, seed=6)]
    out = _replayed(spec, lines, periods, tmp_path, seed=8)
    expected = read_jsonl(out / "releases.jsonl") + [
        c for c in read_jsonl(out / "consistent.jsonl") if c["revision"] == 1
    ]
    window = 3600.0
    batches: dict[int, list[InputRecord]] = defaultdict(list)
    for offset, text in enumerate(lines):
        arrival = (parse_instant(json.loads(text)["event_time"]) or 0.0) + 60.0
        batches[int(arrival // window)].append(
            InputRecord("admissions", 0, offset, b"admissions", text.encode())
        )
    now = [0.0]
    service = ReleaseService(spec, sampler=InsecureSeededSampler(8), state={}, clock=lambda: now[0])
    published: list[dict[str, Any]] = []
    for hour in sorted(batches):
        now[0] = (hour + 1) * window
        for outcome in (service.tick(), service.process(batches[hour])):
            published += [json.loads(p.value) for p in outcome.publications]
    now[0] = release_instant(spec, periods)
    while True:
        published += [json.loads(p.value) for p in service.tick().publications]
        if not service.due():
            break
    published = [p for p in published if p["kind"] != "dead_letter"]
    assert sorted(published, key=lambda r: r["key"]) == sorted(expected, key=lambda r: r["key"])


def test_the_feed_merges_a_wide_periods_parts_into_every_counter(tmp_path: Path) -> None:
    """The feed model reads each part of a period (in any order, repeated) and shows all
    6,388 counters of it, with the values of the parts."""
    from streamdp.feed.model import FeedView

    spec = example_spec("county-admissions")
    lines = [line.text for line in generate("county-admissions", 7, 50.0, seed=2)]
    out = _replayed(spec, lines, 7, tmp_path, seed=3)
    parts = read_jsonl(out / "consistent.jsonl")
    view = FeedView()
    for record in [*reversed(parts), *parts]:  # any order, redelivered
        view.add(record, "consistent")
    rows = view.consistent_rows()
    width = spec.streams["admissions-by-county"].counters.width
    assert len(rows) == 7 * width
    merged = {
        (c["period"], name): value
        for c in merged_parts(parts)
        for name, value in c["counts"].items()
    }
    assert {(r["period"], r["counter"]): r["consistent_count"] for r in rows} == merged
