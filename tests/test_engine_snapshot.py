"""Snapshot at any event, restore into a fresh engine, continue: outputs identical to an
uninterrupted run, and no noise is ever redrawn (sampler calls are counted)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scenario_specs import UNIT_KEY, scenario_spec
from test_engine_support import arrivals_following, drive_clocked

from streamdp.engine import Engine, MemoryLedgerBackend
from streamdp.errors import StateError
from streamdp.synth import example_spec, generate


class IndexedSampler:
    """Deterministic noise that depends only on (seed, call number): a restored engine given a
    sampler positioned at the snapshot's call count reproduces the uninterrupted run."""

    name = "test-indexed"
    secure = False

    def __init__(self, seed: int, start: int = 0) -> None:
        self.seed = seed
        self.calls = start

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        p = -np.expm1(-1.0 / scale)
        return (rng.geometric(p, size) - rng.geometric(p, size)).astype(np.int64)

    gaussian_name = "test-indexed-gaussian"

    def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        return np.rint(rng.normal(0.0, sigma, size)).astype(np.int64)  # shape only matters


@pytest.mark.parametrize(
    ("scenario", "periods", "rate"),
    [
        ("restaurant-rolling", 30, 15),
        ("hospital", 70, 8),
        ("restaurant-rolling+kary_gls", 30, 15),
        ("hospital+kary_digits", 70, 8),
        ("census+zcdp", 12, 10),  # discrete Gaussian nodes, epochs of 8 months
        ("census+zcdp_blt", 12, 10),  # the lattice BLT: buffers and noisy values restored
        # privacy units (per-unit logs restored: a lost one lets a patient count again), also
        # with the k-ary tree's epoch noise; a places tree with its tree consistency
        ("hospital-patients", 40, 8),
        ("hospital-patients+kary_gls", 40, 8),
        ("county-admissions", 12, 10),
    ],
)
def test_restore_at_any_event_continues_identically(scenario, periods, rate) -> None:
    spec = scenario_spec(scenario)
    base = "restaurant" if scenario.startswith("restaurant") else scenario.partition("+")[0]
    generated = list(generate(base, periods, rate, seed=9, bad_fraction=0.05, spec=spec))
    lines = [line.text for line in generated]
    # the daemon's mode: the clock advances between records, closing periods on the way
    arrivals = arrivals_following(generated)
    reference_sampler = IndexedSampler(1)
    reference = Engine(spec, sampler=reference_sampler, unit_key=UNIT_KEY)
    ref_out, ref_dead = drive_clocked(reference, lines, arrivals)
    ref_json = [r.to_json() for r in ref_out]
    assert any('"epoch":1' in j for j in ref_json) or scenario.startswith("hospital")

    rng = np.random.default_rng(4)
    cuts = sorted({0, len(lines) - 1, *rng.integers(1, len(lines) - 1, size=4).tolist()})
    for cut in cuts:
        sampler = IndexedSampler(1)
        first = Engine(
            spec, sampler=sampler, ledger_backend=MemoryLedgerBackend(), unit_key=UNIT_KEY
        )
        out1, dead1 = drive_clocked(first, lines[:cut], arrivals[:cut])
        state = json.loads(json.dumps(first.snapshot()))  # plain JSON-able data
        calls_at_cut = sampler.calls

        restored_sampler = IndexedSampler(1, start=calls_at_cut)
        second = Engine(
            spec, sampler=restored_sampler, ledger_backend=MemoryLedgerBackend(), unit_key=UNIT_KEY
        )
        second.restore(state)
        assert restored_sampler.calls == calls_at_cut  # restoring draws nothing
        out2, dead2 = drive_clocked(second, lines[cut:], arrivals[cut:])

        assert [r.to_json() for r in out1 + out2] == ref_json
        assert [d.to_json() for d in dead1 + dead2] == [d.to_json() for d in ref_dead]
        assert restored_sampler.calls == reference_sampler.calls  # nothing drawn twice
        assert second.stats.to_dict() == reference.stats.to_dict()


def test_restore_refuses_another_configuration_and_garbage() -> None:
    spec = example_spec("hiv")
    engine = Engine(spec, sampler=IndexedSampler(0))
    state = engine.snapshot()
    other = Engine(example_spec("restaurant"), sampler=IndexedSampler(0))
    with pytest.raises(StateError, match="different configuration"):
        other.restore(state)
    broken = dict(state)
    broken["streams"] = {"hiv-monthly": {"version": 1, "stream": "hiv-monthly"}}
    with pytest.raises(StateError, match="malformed"):
        Engine(spec, sampler=IndexedSampler(0)).restore(broken)
    with pytest.raises(StateError, match="not an engine snapshot"):
        engine.restore({"kind": "something else"})
    # what a part of a stream's state finds wrong is said with the stream named
    plain = json.loads(json.dumps(state))
    for part, value, words in (
        ("retired_carry", [0, [1.0]], "retired_carry must be"),
        ("counter", {**plain["streams"]["hiv-monthly"]["counter"], "noisy_nodes": "x"}, ""),
    ):
        damaged = json.loads(json.dumps(plain))
        damaged["streams"]["hiv-monthly"][part] = value
        with pytest.raises(StateError, match=f"^stream 'hiv-monthly': {words}"):
            Engine(spec, sampler=IndexedSampler(0)).restore(damaged)


def test_replayed_offsets_are_skipped_not_counted_twice() -> None:
    spec = example_spec("hiv")
    engine = Engine(spec, sampler=IndexedSampler(0))
    event = {
        "event_id": "a",
        "event_time": "2024-01-05T00:00:00Z",
        "attributes": {"hiv_positive": True},
    }
    first = engine.ingest(event, source_topic="admissions", partition=0, offset=7)
    again = engine.ingest(
        dict(event, event_id="b"), source_topic="admissions", partition=0, offset=7
    )
    assert first.accepted == ("hiv-monthly",)
    assert again.skipped
    assert engine.stats.events_accepted == 1
    assert engine.stats.skipped == 1
    assert engine.snapshot()["offsets"] == [["admissions", 0, 7]]


def test_a_state_written_with_its_counters_in_another_order_is_refused() -> None:
    """The configuration's fingerprint does not cover the code that lays counters out: a
    version that ordered a places tree or the census cells differently would restore every
    open count and node under the wrong counter with the same width (restart audit). The
    state carries the layout's digest; a state without it (written before) still restores."""
    spec = example_spec("census")
    engine = Engine(spec, sampler=IndexedSampler(0))
    state = json.loads(json.dumps(engine.snapshot()))
    (stream,) = state["streams"]
    assert len(state["streams"][stream]["counters_sha256"]) == 64
    moved = json.loads(json.dumps(state))
    moved["streams"][stream]["counters_sha256"] = "0" * 64
    with pytest.raises(StateError, match="counters in another order"):
        Engine(spec, sampler=IndexedSampler(0)).restore(moved)
    older = json.loads(json.dumps(state))
    del older["streams"][stream]["counters_sha256"]
    Engine(spec, sampler=IndexedSampler(0)).restore(older)
