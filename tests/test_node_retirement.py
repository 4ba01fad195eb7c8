"""Retiring a past epoch's noisy nodes once no revision reads them.

What these tests prove:
- dropping the nodes changes no published byte: an engine that retires them (a replay's) and
  one that keeps every epoch publish identical releases and revisions, for every mechanism and
  kind (fda with combos, k-ary and zCDP projected at publication, the binary tree and BLT under
  zCDP, places with level budgets and non-negative estimates, census attribute budgets), under
  three revision schedules (at each epoch's end; every two periods, not at the end; never, with
  one revision on demand at the end);
- memory stops growing with the epochs: a stream whose periods are all revised holds at most
  one past epoch, a decoded stream none; a stream that never revises keeps them all (an
  on-demand revision still publishes every period);
- a state written after a retirement keeps the carried consistent total bit for bit: an engine
  restored from its JSON continues exactly as the uninterrupted one, and a state whose kept
  carry does not fit is refused;
- in the daemon, a checkpoint deletes the stored copies of retired nodes and of past epochs'
  noise after the hot state that no longer refers to them, so the state table's node keys stop
  growing; a crash that lost those deletions leaves keys that the next load deletes, and the
  restarted service publishes what the uninterrupted one does.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from service_steps import apply_writes

from streamdp.continual.blt_counter import BltStrategy
from streamdp.continual.kary import KaryStrategy
from streamdp.daemon import state_chunks
from streamdp.daemon.checkpoint import parse_node_key, parse_noise_key
from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine import Engine, EngineSpec
from streamdp.engine.periods import parse_instant
from streamdp.errors import StateError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import generate, release_instant
from tests.test_privacy_float_engine import SCENARIOS, as_zcdp
from tests.test_privacy_float_engine import _spec as scenario_spec

HORIZON = 3
PERIODS = 11  # three whole epochs and two periods of a fourth
SCHEDULES = {
    "epoch-end": (0, True),
    "every-2": (2, False),
    "never": (0, False),
}
KINDS = [
    "restaurant",
    "restaurant+kary_gls",
    "restaurant+blt",
    "hospital+zcdp",
    "census+zcdp_gls",
    "census+attributes",
    "county-admissions+levels",
    "county-admissions+nonneg",
]


def _short(kind: str, schedule: str) -> EngineSpec:
    """``kind``'s spec with 3-period epochs and the revision ``schedule``."""
    if kind == "restaurant+blt":
        spec = as_zcdp(scenario_spec("restaurant"), "blt")
    else:
        spec = scenario_spec(kind)
    every, at_end = SCHEDULES[schedule]
    streams = {
        name: replace(
            stream,
            horizon=HORIZON,
            branching=None,
            consistency=replace(stream.consistency, every_periods=every, at_epoch_end=at_end),
        )
        for name, stream in spec.streams.items()
    }
    return replace(spec, streams=streams)


def _base(kind: str) -> str:
    return "restaurant" if kind == "restaurant+blt" else SCENARIOS[kind][0]


def _lines(kind: str, spec: EngineSpec) -> list[tuple[str, float]]:
    out = []
    for line in generate(_base(kind), PERIODS, 4.0, seed=7, spec=spec):
        ts = parse_instant(json.loads(line.text)["event_time"])
        assert ts is not None
        out.append((line.text, ts + 60.0))
    return out


def _run(
    engine: Engine, lines: list[tuple[str, float]], spec: EngineSpec, first: int = 0
) -> list[str]:
    """Feed ``lines[first:]`` (the clock following their arrivals), close through the last
    period and revise every stream once more; the published records as JSON."""
    out: list[Any] = []
    for text, arrival in lines[first:]:
        out += engine.advance_clock(arrival)
        out += engine.ingest(text).dead_letters
    out += engine.advance_clock(release_instant(spec, PERIODS))
    for name in spec.streams:
        out += engine.revise(name)
    return [r.to_json() for r in out]


def _past_epochs(engine: Engine) -> dict[str, int]:
    return {name: len(runtime.nodes.past) for name, runtime in engine.streams.items()}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("kind", KINDS)
def test_retiring_nodes_changes_no_published_byte(kind: str, schedule: str) -> None:
    spec = _short(kind, schedule)
    lines = _lines(kind, spec)
    retiring = Engine(spec, sampler=InsecureSeededSampler(5), stores_nodes=False)
    keeping = Engine(spec, sampler=InsecureSeededSampler(5))  # never taken: keeps every epoch
    published = _run(retiring, lines, spec)
    assert any('"consistent"' in r or '"revision"' in r for r in published)
    assert published == _run(keeping, lines, spec)
    # every epoch before the current one (a monthly stream of a daily spec has none yet)
    epochs = {n: r.counter.epoch for n, r in keeping.streams.items()}
    assert max(epochs.values()) == PERIODS // HORIZON
    assert _past_epochs(keeping) == epochs
    decoded = {
        n
        for n, r in retiring.streams.items()
        if isinstance(r.strategy, (KaryStrategy, BltStrategy))
    }
    for name, held in _past_epochs(retiring).items():
        if name in decoded:
            assert held == 0, name  # its revisions read the current epoch only
        elif schedule == "never":
            assert held == epochs[name], name  # kept for the on-demand revision
        else:
            assert held <= 1, name


@pytest.mark.parametrize("kind", ["restaurant", "county-admissions+levels", "restaurant+blt"])
def test_a_state_written_after_retirement_restores_bit_for_bit(kind: str) -> None:
    spec = _short(kind, "every-2")
    lines = _lines(kind, spec)
    whole = Engine(spec, sampler=InsecureSeededSampler(3), stores_nodes=False)
    expected = _run(whole, lines, spec)
    cut = next(i for i, (_, arrival) in enumerate(lines) if arrival > release_instant(spec, 8))
    first = Engine(spec, sampler=InsecureSeededSampler(3), stores_nodes=False)
    before: list[Any] = []
    for text, arrival in lines[:cut]:
        before += first.advance_clock(arrival)
        before += first.ingest(text).dead_letters
    state = json.loads(json.dumps(first.snapshot()))
    streams = state["streams"]
    if kind != "restaurant+blt":  # a Fenwick stream keeps the carry past its retired epochs
        assert all(s["retired_carry"][0] >= 1 for s in streams.values())
    # the sampler is replaced by one at the same point of its stream (seeded: a test only)
    second = Engine(spec, sampler=first.sampler, stores_nodes=False)
    second.restore(state)
    assert [r.to_json() for r in before] + _run(second, lines, spec, cut) == expected


def test_a_state_whose_kept_carry_does_not_fit_is_refused() -> None:
    spec = _short("restaurant", "epoch-end")
    lines = _lines("restaurant", spec)
    engine = Engine(spec, sampler=InsecureSeededSampler(3), stores_nodes=False)
    _run(engine, lines, spec)
    state = json.loads(json.dumps(engine.snapshot()))
    (stream,) = state["streams"].values()
    assert stream["retired_carry"][0] == PERIODS // HORIZON  # every past epoch retired
    assert stream["past_nodes"] == []
    for broken in (
        {**stream, "retired_carry": [2, stream["retired_carry"][1]]},  # another epoch
        {**stream, "retired_carry": [3, stream["retired_carry"][1][:-1]]},  # too short
        {k: v for k, v in stream.items() if k != "retired_carry"},  # retired, no carry
    ):
        bad = {**state, "streams": {next(iter(state["streams"])): broken}}
        with pytest.raises(StateError):
            Engine(spec, sampler=InsecureSeededSampler(3)).restore(bad)


def _daemon_run(
    spec: EngineSpec, lines: list[tuple[str, float]], *, lose_cleanup_at: int | None = None
) -> tuple[dict[str, Any], list[str], int]:
    """Drive a release service period by period over a dict table (restarting it after the
    checkpoint at ``lose_cleanup_at``, whose deletions a crash lost); returns the table, what
    was published, and the most node keys the table held at once."""
    source = next(iter(spec.sources.values()))
    table: dict[str, Any] = {}
    now = [0.0]

    def service() -> ReleaseService:
        return ReleaseService(spec, sampler=sampler, state=table, clock=lambda: now[0])

    sampler = InsecureSeededSampler(4)
    svc = service()
    published: list[str] = []
    most_nodes = 0
    steps = 0
    by_period: dict[int, list[InputRecord]] = {}
    for offset, (text, arrival) in enumerate(lines):
        period = next(p for p in range(1, PERIODS + 2) if arrival < release_instant(spec, p))
        by_period.setdefault(period, []).append(
            InputRecord(source.topic, 0, offset, source.name.encode(), text.encode())
        )
    for period in range(1, PERIODS + 1):
        now[0] = release_instant(spec, period) - 1.0
        outcomes = [svc.process(by_period.get(period, []))]
        now[0] = release_instant(spec, period)
        outcomes.append(svc.tick())
        for outcome in outcomes:
            apply_writes(table, outcome.writes)
            published += [str(p.value) for p in outcome.publications]
            steps += 1
            if steps == lose_cleanup_at:
                svc = service()  # restart: the deletions were lost, the load makes its own
                loaded = svc.tick()
                apply_writes(table, loaded.writes)
                published += [str(p.value) for p in loaded.publications]
                apply_writes(table, loaded.cleanup)
                continue
            apply_writes(table, outcome.cleanup)
        most_nodes = max(most_nodes, sum(parse_node_key(source.name, k) is not None for k in table))
    return table, [p for p in published if '"dead_letter"' not in p], most_nodes


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("kind", ["restaurant", "restaurant+kary_gls"])
def test_the_daemon_deletes_retired_nodes_after_the_state_that_drops_them(
    kind: str, wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if wide:  # every node stored in parts of 2 values (as a places stream's are)
        monkeypatch.setattr(state_chunks, "NODE_PART_VALUES", 2)
    spec = _short(kind, "epoch-end")
    lines = _lines(kind, spec)
    source = next(iter(spec.sources))
    table, published, most = _daemon_run(spec, lines)
    stored = [parse_node_key(source, k) for k in table]
    epochs = {key[1] for key in stored if key is not None}
    assert epochs == {PERIODS // HORIZON}, "only the current epoch's nodes stay stored"
    parts = [k.split("|") for k in table if "|nodepart|" in k]
    assert bool(parts) == wide
    assert {int(p[-3]) for p in parts} <= {PERIODS // HORIZON}, "parts of a retired node"
    assert most <= 2 * HORIZON * len(spec.streams)  # one past epoch at most, briefly
    noise = {parse_noise_key(source, k) for k in table} - {None}
    assert {key[1] for key in noise if key is not None} <= {PERIODS // HORIZON}
    # a crash after a checkpoint that retired an epoch, before its deletions: the next load
    # deletes what is left, and the run publishes what the uninterrupted one does
    for lost in range(2, 2 * PERIODS, 3):
        again, republished, _ = _daemon_run(spec, lines, lose_cleanup_at=lost)
        assert again == table, lost
        assert sorted(set(republished)) == sorted(set(published)), lost


@pytest.mark.parametrize("stores_nodes", [False, True])
@pytest.mark.parametrize("schedule", ["epoch-end", "every-2"])
@pytest.mark.parametrize(
    "kind", ["restaurant", "census+attributes", "county-admissions+levels", "restaurant+kary_gls"]
)
def test_a_restore_after_any_close_continues_bit_for_bit(
    kind: str, schedule: str, stores_nodes: bool
) -> None:
    """A restart after any period, also between a revision and the retirement it allows (the
    daemon retires at its next checkpoint, before any revision: a stream with level or
    attribute budgets must weigh that carry's projection as a revision does)."""
    spec = _short(kind, schedule)
    lines = _lines(kind, spec)

    def run(cut: int | None) -> list[str]:
        sampler = InsecureSeededSampler(3)
        engine = Engine(spec, sampler=sampler, stores_nodes=stores_nodes)
        out: list[Any] = []
        pending = list(lines)
        for period in range(1, PERIODS + 1):
            until = release_instant(spec, period)
            while pending and pending[0][1] < until:
                text, arrival = pending.pop(0)
                out += engine.advance_clock(arrival)
                out += engine.ingest(text).dead_letters
            out += engine.advance_clock(until)
            if stores_nodes:
                engine.take_changes()  # the daemon's checkpoint: nodes handed out, then retired
            if period == cut:
                state = json.loads(json.dumps(engine.snapshot()))
                engine = Engine(spec, sampler=sampler, stores_nodes=stores_nodes)
                engine.restore(state)
                if stores_nodes:
                    engine.take_changes()
        for name in spec.streams:
            out += engine.revise(name)
        return [r.to_json() for r in out]

    whole = run(None)
    assert any('"consistent"' in r for r in whole)
    for cut in range(1, PERIODS):
        assert run(cut) == whole, f"restored after period {cut}"
