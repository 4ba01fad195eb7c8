"""The coupling through the engine, on both paths (issue 25, Break 1).

``D`` with the seeded noise ``z`` and ``D + r`` (one more valid record, counted) with the noise
``z - R e`` (``e`` the record's contribution to each stream of its source, ``R`` the nodes
covering its period: :class:`tests.coupling.CoupledSampler`) have the same noisy nodes, so
every published record (releases, consistent revisions) must be byte-identical. Run for every
mechanism x kind the example specs give (combos, census hierarchy with the projection at
publication, flags, a source with two streams) through the file replay and the daemon's release
service. Without the coupling the same record does move the output (the power check).
The counter-level version with 1,000 draws per case is ``test_float_coupling.py``;
``benchmarks/coupling_engine.py`` runs this engine-level check with 1,000 draws per case.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine import EngineSpec
from streamdp.engine.budget_groups import budget_groups
from streamdp.engine.periods import PeriodClock, parse_instant
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.stream import stream_strategy
from streamdp.kinds import stream_kind
from streamdp.kinds.places_file import parse_places
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant
from tests.census_fixture import weighted_census_spec
from tests.coupling import CoupledSampler, Footprint
from tests.places_fixture import small_county_spec

WINDOW = 6 * 3600.0
# scenario: (example, mechanism or "" for the example's own, periods, events per period)
SCENARIOS = {
    "restaurant": ("restaurant", "", 6, 6.0),
    "restaurant+kary_gls": ("restaurant", "kary_gls", 6, 6.0),
    "census+kary_gls": ("census", "kary_gls", 3, 8.0),
    "census+kary_digits": ("census", "kary_digits", 3, 8.0),
    "hiv": ("hiv", "", 4, 10.0),
    "hiv+kary_gls": ("hiv", "kary_gls", 4, 10.0),
    "hospital+kary_gls": ("hospital", "kary_gls", 5, 5.0),
    "hospital+kary_digits": ("hospital", "kary_digits", 5, 5.0),
    # zCDP streams (issue 27): discrete Gaussian node noise, the same coupling
    "census+zcdp": ("census", "zcdp", 3, 8.0),
    "restaurant+zcdp": ("restaurant", "zcdp", 6, 6.0),
    "hospital+zcdp": ("hospital", "zcdp", 5, 5.0),
    "census+zcdp_gls": ("census", "zcdp_gls", 3, 8.0),  # projected at publication
    "hospital+zcdp_gls": ("hospital", "zcdp_gls", 5, 5.0),
    # places (issue 29) on a small geography: consistent revisions by the tree projection
    "county-admissions": ("county-admissions", "", 4, 12.0),
    "county-admissions+zcdp": ("county-admissions", "zcdp", 4, 12.0),
    # each level its own share of the budget: one bank per level, revisions weighted by level
    "county-admissions+levels": ("county-admissions", "levels", 4, 12.0),
    "county-admissions+levels+zcdp": ("county-admissions", "levels+zcdp", 4, 12.0),
    # the total, each marginal and the cells their own share: revisions weighted by group
    "census+attributes": ("census", "attributes", 3, 8.0),
    "census+attributes+zcdp": ("census", "attributes+zcdp", 3, 8.0),
    # the non-negative integer estimates published beside the revisions (rounded, ties
    # broken by public keys): post-processing of the noisy values alone
    "county-admissions+nonneg": ("county-admissions", "nonneg", 4, 12.0),
    "county-admissions+levels+zcdp+nonneg": ("county-admissions", "levels+zcdp+nonneg", 4, 12.0),
    # places under every other mechanism (places audit of 2026-11-28: covered by hand only)
    "county-admissions+binary": ("county-admissions", "binary", 4, 12.0),
    "county-admissions+naive": ("county-admissions", "naive", 4, 12.0),
    "county-admissions+kary_gls": ("county-admissions", "kary_gls", 4, 12.0),
    "county-admissions+kary_digits": ("county-admissions", "kary_digits", 4, 12.0),
    "county-admissions+zcdp_gls": ("county-admissions", "zcdp_gls", 4, 12.0),
    "county-admissions+levels+binary": ("county-admissions", "levels+binary", 4, 12.0),
    "county-admissions+kary_gls+nonneg": ("county-admissions", "kary_gls+nonneg", 4, 12.0),
    # a tree with a leaf one level down and a single-child chain, over two epochs (the
    # second starts from the first's noisy total)
    "irregular-places": ("irregular-places", "", 4, 12.0),
    "irregular-places+kary_gls": ("irregular-places", "kary_gls", 4, 12.0),
}
#: nation US; state A with two counties; B with one; C a leaf on the state level
IRREGULAR_PLACES = "node,parent\nUS,\nA,US\nB,US\nC,US\na1,A\na2,A\nb1,B\n"
LEVEL_WEIGHTS = (1, 2, 5)
DRAWS = 20


def _spec(scenario: str) -> EngineSpec:
    base, mechanism, _, _ = SCENARIOS[scenario]
    if mechanism.endswith("nonneg"):
        spec = _spec_of(base, mechanism.removesuffix("nonneg").removesuffix("+"))
        streams = {
            n: replace(s, consistency=replace(s.consistency, nonnegative_integers=True))
            for n, s in spec.streams.items()
        }
        return replace(spec, streams=streams)
    return _spec_of(base, mechanism)


def _spec_of(base: str, mechanism: str) -> EngineSpec:
    weights = LEVEL_WEIGHTS if mechanism.startswith("levels") else ()
    if base == "county-admissions":
        spec = small_county_spec(level_weights=weights)
    elif base == "irregular-places":
        spec = _irregular_places_spec()
    elif mechanism.startswith("attributes"):
        spec = weighted_census_spec()
    else:
        spec = example_spec(base)
    mechanism = mechanism.removeprefix("levels").removeprefix("attributes").removeprefix("+")
    if not mechanism:
        return spec
    if mechanism in ("zcdp", "zcdp_gls"):
        return as_zcdp(spec, "kary_gls" if mechanism == "zcdp_gls" else "binary")
    streams = {n: replace(s, mechanism=mechanism) for n, s in spec.streams.items()}
    return replace(spec, streams=streams)


def _irregular_places_spec() -> EngineSpec:
    """The county example on :data:`IRREGULAR_PLACES` with a horizon of 2 periods."""
    spec = small_county_spec()
    places = parse_places(IRREGULAR_PLACES.encode(), "irregular.csv")
    assert places.leaf_paths()["C"] == (0, 3)  # a leaf above the deepest level
    streams = {
        name: replace(s, horizon=2, counters=replace(s.counters, places=places))
        for name, s in spec.streams.items()
    }
    return replace(spec, streams=streams)


def as_zcdp(spec: EngineSpec, mechanism: str) -> EngineSpec:
    """``spec`` with every stream a rho = 0.5 zCDP stream of ``mechanism`` (its kind's L2
    bound) and every source capping rho."""
    streams = {
        name: replace(
            stream,
            mechanism=mechanism,
            objective="total",
            rho=Decimal("0.5"),
            delta=Decimal("1e-10"),
            l2_squared=stream_kind(stream.counters.kind).l2_squared_bound(
                stream.counters, stream.constraints, stream.sensitivity
            ),
        )
        for name, stream in spec.streams.items()
    }
    sources = {
        name: replace(source, epsilon_cap=None, rho_cap=Decimal(len(streams)))
        for name, source in spec.sources.items()
    }
    return replace(spec, streams=streams, sources=sources)


def _records(scenario: str, spec: EngineSpec) -> list[tuple[str, float]]:
    base, _, periods, rate = SCENARIOS[scenario]
    if base == "irregular-places":
        base = "county-admissions"  # its records, at the spec's own leaves
    return _generated(base, periods, rate, spec)


def _generated(base: str, periods: int, rate: float, spec: EngineSpec) -> list[tuple[str, float]]:
    """The scenario's records, each arriving a minute after its event time."""
    out = []
    for line in generate(base, periods, rate, seed=11, spec=spec):
        ts = parse_instant(json.loads(line.text)["event_time"])
        assert ts is not None
        out.append((line.text, ts + 60.0))
    return out


def _with_extra(
    spec: EngineSpec, records: list[tuple[str, float]], pick: int
) -> tuple[list[tuple[str, float]], list[Footprint]] | None:
    """D + a copy of record ``pick`` under a new id (counted like it), and its footprints;
    None when that record counts in no stream."""
    text, arrival = records[pick]
    event = dict(json.loads(text), event_id=f"extra-{pick}")
    footprints = []
    for name, stream in spec.streams.items():
        vector = np.zeros(stream.counters.width, dtype=np.int64)
        for index, amount in (
            stream_kind(stream.counters.kind).extractor(stream).contribution(event)
        ):
            vector[index] += amount
        instant = parse_instant(event["event_time"])
        assert instant is not None
        j = PeriodClock(stream.period).index_of(instant)
        epoch, index = divmod(j, stream.horizon)
        groups = budget_groups(stream)
        if not groups:
            footprints.append(Footprint(name, epoch, index + 1, vector))
        for group in groups:  # each level's bank draws its own noise, labelled by the level
            label = f"{name}|{group.name}"
            footprints.append(Footprint(label, epoch, index + 1, vector[group.start : group.stop]))
    if not any(f.vector.any() for f in footprints):
        return None  # counted nowhere (a negative flag): the caller picks another
    out = list(records)
    out.insert(pick + 1, (json.dumps(event), arrival))
    return out, footprints


def _via_replay(
    spec: EngineSpec, records: list[tuple[str, float]], periods: int, sampler: Any, tmp: Path
) -> list[str]:
    tmp.mkdir(parents=True)
    path = tmp / "events.jsonl"
    path.write_text("".join(text + "\n" for text, _ in records), encoding="utf-8")
    replay(spec, path, tmp / "out", as_of=release_instant(spec, periods), sampler=sampler)
    out = tmp / "out"
    lines = read_jsonl(out / "releases.jsonl") + read_jsonl(out / "consistent.jsonl")
    return [json.dumps(line, sort_keys=True) for line in lines]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _via_daemon(
    spec: EngineSpec, records: list[tuple[str, float]], periods: int, sampler: Any
) -> list[str]:
    source = next(iter(spec.sources.values()))
    now = [0.0]
    service = ReleaseService(spec, sampler=sampler, state={}, clock=lambda: now[0])
    windows: dict[int, list[InputRecord]] = {}
    for offset, (text, arrival) in enumerate(records):
        windows.setdefault(int(arrival // WINDOW), []).append(
            InputRecord(source.topic, 0, offset, source.name.encode(), text.encode())
        )
    published: list[str] = []
    for window in sorted(windows):
        now[0] = (window + 1) * WINDOW
        # the public clock's timer, then the window's records
        published += [_text(p.value) for p in service.tick().publications]
        published += [_text(p.value) for p in service.process(windows[window]).publications]
    now[0] = release_instant(spec, periods)
    while True:
        published += [_text(p.value) for p in service.tick().publications]
        if not service.due():
            break
    return [p for p in published if '"dead_letter"' not in p]


def coupled_draw(
    scenario: str, path: str, rng: np.random.Generator, tmp: Path, *, power: bool = False
) -> tuple[bool, bool | None]:
    """One draw: D with seeded noise and D plus one random record under the coupled noise,
    through ``path`` (replay or daemon). Returns whether every published byte was equal and,
    with ``power``, whether the same record without the coupling changed the output."""
    spec = _spec(scenario)
    periods = SCENARIOS[scenario][2]
    records = _records(scenario, spec)
    strategies = {name: stream_strategy(stream) for name, stream in spec.streams.items()}
    for name, stream in spec.streams.items():
        strategies |= {f"{name}|{g.name}": strategies[name] for g in budget_groups(stream)}
    seed = int(rng.integers(2**31))
    extra = None
    while extra is None:
        extra = _with_extra(spec, records, int(rng.integers(len(records))))
    neighbour, footprints = extra

    def run(data: list[tuple[str, float]], sampler: Any, label: str) -> list[str]:
        if path == "replay":
            return _via_replay(spec, data, periods, sampler, tmp / label)
        return _via_daemon(spec, data, periods, sampler)

    base = run(records, CoupledSampler(seed, strategies), "d")
    assert base, "nothing was published"
    coupled = run(neighbour, CoupledSampler(seed, strategies, footprints), "coupled")
    moved = None
    if power:
        moved = base != run(neighbour, CoupledSampler(seed, strategies), "plain")
    return base == coupled, moved


@pytest.mark.parametrize("path", ["replay", "daemon"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_counted_record_under_the_coupling_changes_no_published_byte(
    scenario: str, path: str, tmp_path: Path
) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{scenario}|{path}".encode()))
    for draw in range(DRAWS):
        # power on the first draw: without the coupling the record moves the output
        equal, moved = coupled_draw(scenario, path, rng, tmp_path / str(draw), power=draw == 0)
        assert equal, f"draw {draw}: a counted record changed published bytes"
        assert moved in (None, True)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.endswith("nonneg")])
def test_the_nonnegative_scenarios_publish_their_estimates(scenario: str, tmp_path: Path) -> None:
    """The coupling above covers the non-negative integer estimates only if they are
    published: every revision of these scenarios carries them."""
    spec = _spec(scenario)
    lines = _via_replay(
        spec,
        _records(scenario, spec),
        SCENARIOS[scenario][2],
        InsecureSeededSampler(1),
        tmp_path / "d",
    )
    revisions = [json.loads(line) for line in lines if '"revision"' in line]
    assert revisions
    assert all(r["nonnegative_counts"] and r["nonnegative_totals"] for r in revisions)


class _ZeroGaussian(InsecureSeededSampler):
    """No noise at all (a test device): the noisy values it leads to are the encoding F."""

    def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> Any:
        return np.zeros(size, dtype=np.int64)


class _ShiftedGaussian(InsecureSeededSampler):
    """Seeded labelled draws minus ``shifts[label]`` (the BLT coupling: D' gets z - (F' - F),
    a shift that depends on the data, so it is computed from the two encodings)."""

    def __init__(self, seed: int, shifts: dict[str, Any]) -> None:
        super().__init__(seed)
        self.shifts = shifts

    def discrete_gaussian(self, sigma: float, size: int, *, label: str = "") -> Any:
        noise = super().discrete_gaussian(sigma, size, label=label)
        shift = self.shifts.get(label)
        return noise if shift is None else noise - shift


def _encodings(spec: EngineSpec, records: list[tuple[str, float]], periods: int) -> dict[str, Any]:
    """Per draw label, the BLT encoding F of the data (the noisy values under zero noise)."""
    from streamdp.engine import Engine

    engine = Engine(spec, sampler=_ZeroGaussian(0))
    for text, _ in records:
        engine.ingest(text)
    engine.advance_clock(release_instant(spec, periods))
    out = {}
    for name, runtime in engine.streams.items():
        for epoch, values in enumerate(runtime.node_values()):
            for t, row in enumerate(values, start=1):
                out[f"{name}|e{epoch}|n{t}"] = np.asarray(row, dtype=np.int64)
    return out


#: BLT coupling cases: base -> (periods, events per period)
BLT_BASES = {
    "census": (3, 8.0),
    "restaurant": (6, 6.0),
    "hospital": (5, 5.0),
    "county-admissions": (4, 12.0),
}


def blt_coupled_draw(
    base: str, path: str, rng: np.random.Generator, tmp: Path, *, power: bool = False
) -> tuple[bool, bool | None]:
    """One draw of the lattice BLT coupling (issue 27): D with noise z and D + one counted
    record with noise z - (F(D') - F(D)) through ``path``; returns whether every published
    byte was equal and, with ``power``, whether the record moved the output without the
    shift. Raises if the record changed no encoding (the draw would prove nothing)."""
    periods, rate = BLT_BASES[base]
    small = small_county_spec() if base == "county-admissions" else example_spec(base)
    spec = as_zcdp(small, "blt")
    records = _generated(base, periods, rate, spec)

    def run(data: list[tuple[str, float]], sampler: Any, label: str) -> list[str]:
        if path == "replay":
            return _via_replay(spec, data, periods, sampler, tmp / label)
        return _via_daemon(spec, data, periods, sampler)

    extra = None
    while extra is None:
        extra = _with_extra(spec, records, int(rng.integers(len(records))))
    neighbour, _ = extra
    before = _encodings(spec, records, periods)
    after = _encodings(spec, neighbour, periods)
    shifts = {k: after[k] - before[k] for k in before if (after[k] != before[k]).any()}
    if not shifts:
        raise AssertionError("the extra record changed no encoding")
    seed = int(rng.integers(2**31))
    published = run(records, _ShiftedGaussian(seed, {}), "d")
    if not published:
        raise AssertionError("nothing was published")
    equal = run(neighbour, _ShiftedGaussian(seed, shifts), "coupled") == published
    moved = None
    if power:  # without the shifted noise the record moves the output
        moved = run(neighbour, _ShiftedGaussian(seed, {}), "plain") != published
    return equal, moved


@pytest.mark.parametrize("path", ["replay", "daemon"])
@pytest.mark.parametrize("base", list(BLT_BASES))
def test_blt_streams_under_the_coupling_change_no_published_byte(
    base: str, path: str, tmp_path: Path
) -> None:
    """The lattice BLT (issue 27): D with noise z and D + one counted record with noise
    z - (F(D') - F(D)) have the same noisy values, so every published byte is equal; without
    the shift the record moves the output (power)."""
    rng = np.random.default_rng(zlib.crc32(f"blt|{base}|{path}".encode()))
    for draw in range(6):
        equal, moved = blt_coupled_draw(base, path, rng, tmp_path / str(draw), power=draw == 0)
        assert equal, f"draw {draw}: a counted record changed published bytes"
        assert moved in (None, True)
