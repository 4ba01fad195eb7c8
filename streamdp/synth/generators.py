"""Synthetic event streams shaped like the seeds' data (test and demo input, never real data).

Scenarios, each matching its example spec in ``streamdp/examples``:

- ``restaurant`` (seed 004): orders of the three combos over cola, burger, wings, fries,
  nuggets; daily periods in Europe/London.
- ``hospital`` (seeds 000/001): admission records with sex, age and ward plus an
  ``hiv_positive`` flag; read by a daily census-style stream and a monthly HIV+ stream.
- ``census`` (seed 000): person records with sex (2) x race (7) x age (23); monthly.
- ``hiv`` (seed 001): monthly admissions with the ``hiv_positive`` flag.
- ``hospital-patients`` (issue 28): the hospital's admissions with a ``patient_id``: patients
  come back, with a heavy-tailed number of admissions each (most once or twice, a few dozens
  of times), and keep their sex, age group and HIV status; read by the streams of
  ``hospital_patients.toml``, which protect the patient.
- ``county-admissions`` (issue 29): admissions naming the patient's county (a leaf of the
  synthetic ``counties.csv``, drawn in proportion to its population) and sex; read by the
  places stream of ``county_admissions.toml``.

Each generated line comes with the rejection reason it is meant to trigger (None for good
events), so tests can check that every bad record lands in the dead-letter output with that
reason while every good event is counted. Randomness: numpy's seeded generator (allowed here:
this is synthetic input, not noise).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from streamdp.engine.periods import PeriodClock, format_instant
from streamdp.engine.spec import EngineSpec, StreamSpec
from streamdp.engine.spec_loading import parse_spec
from streamdp.synth.geography import synthetic_counties

SCENARIOS = ("restaurant", "hospital", "census", "hiv", "hospital-patients", "county-admissions")
#: The example spec (in streamdp/examples) each scenario follows.
EXAMPLE_FILES = {
    "restaurant": "restaurant.toml",
    "hospital": "hospital.toml",
    "census": "census.toml",
    "hiv": "hiv.toml",
    "hospital-patients": "hospital_patients.toml",
    "county-admissions": "county_admissions.toml",
}
#: Tail index of the patients' admission propensities (Pareto): below 2, so the number of
#: admissions per patient has a heavy tail (a patient's expected share grows like N^(1/1.5)).
PATIENT_TAIL = 1.5
#: Admissions per patient on average (the pool is the expected admissions over this).
ADMISSIONS_PER_PATIENT = 3.0
# Bad-record kinds every scenario can produce, plus the order-only ones.
COMMON_BAD = (
    "malformed",
    "schema_violation",
    "bad_timestamp",
    "unknown_source",
    "duplicate_event",
    "before_start",
    "too_far_in_future",
    "control_on_input",
)
ORDER_BAD = ("unknown_item", "invalid_quantity", "not_a_combo", "contribution_over_sensitivity")
PERSON_BAD = ("unknown_category",)


def example_spec(scenario: str) -> EngineSpec:
    """The packaged example spec of ``scenario``."""
    file = resources.files("streamdp").joinpath("examples", EXAMPLE_FILES[scenario])
    with resources.as_file(file) as path:  # a real file: a places file is found beside it
        text = path.read_text("utf-8")
        return parse_spec(text, origin=str(path))


@dataclass(frozen=True)
class Line:
    """One input line, the rejection reason it should get (None: a good event), and the index
    of the generated period it belongs to (for progress reports)."""

    text: str
    expect: str | None
    period: int = 0


def generate(
    scenario: str,
    periods: int,
    rate: float,
    *,
    seed: int = 0,
    bad_fraction: float = 0.0,
    spec: EngineSpec | None = None,
) -> Iterator[Line]:
    """Yield ``periods`` periods of events (Poisson(``rate``) per period), time ordered.

    Bad records are mixed in with probability ``bad_fraction`` per good event, cycling through
    every rejection kind the scenario supports. Their expected reasons hold when the lines are
    replayed as one batch released at :func:`release_instant` (or read by a worker whose clock
    stands at it or earlier with every period still open): a file has no arrival times, so no
    line is ``late``; a ``too_far_in_future`` record is dated just past every stream's future
    limit at that instant (:func:`beyond_future_limit`; it is not made when a stream has no
    limit), so a later ``--as-of`` can count it.
    """
    spec = spec if spec is not None else example_spec(scenario)
    rng = np.random.default_rng(seed)
    grid_stream = next(iter(spec.streams.values()))
    clock = PeriodClock(grid_stream.period)
    source = spec.sources[grid_stream.source]
    maker = _maker(scenario, spec, rng, expected_events=periods * rate)
    has_attributes = any(s.counters.kind == "attributes" for s in spec.streams.values())
    bad_kinds = COMMON_BAD + (
        ORDER_BAD if source.kind == "order" else PERSON_BAD if has_attributes else ()
    )
    future = beyond_future_limit(spec, periods)
    if future is None:
        bad_kinds = tuple(k for k in bad_kinds if k != "too_far_in_future")
    bad_index = 0
    number = 0
    for j in range(periods):
        lo, hi = clock.bounds(j)
        n = int(rng.poisson(rate))
        times = np.sort(rng.uniform(lo, hi, size=n))
        for ts in times:
            number += 1
            event = {
                "event_id": f"{scenario}-{number}",
                "event_time": format_instant(float(ts)),
                "source": source.topic,
                **maker(),
            }
            yield Line(json.dumps(event), None, j)
            if bad_fraction > 0 and rng.uniform() < bad_fraction:
                kind = bad_kinds[bad_index % len(bad_kinds)]
                bad_index += 1
                if kind == "too_far_in_future" and future is not None:
                    bad = dict(event, event_id=f"bad-{number}-{kind}")
                    bad["event_time"] = format_instant(future)
                    yield Line(json.dumps(bad), _future_reason(spec, future), j)
                    continue
                yield Line(_bad(kind, event, clock, j, grid_stream, number), kind, j)


def generated_end(spec: EngineSpec, periods: int) -> float:
    """The end of the last of ``periods`` generated periods (of the spec's first stream)."""
    clock = PeriodClock(next(iter(spec.streams.values())).period)
    return clock.bounds(periods - 1)[1] if periods else clock.bounds(0)[0]


def release_instant(spec: EngineSpec, periods: int) -> float:
    """The public instant at which every generated period of the spec's first stream is due:
    the end of the last one plus the largest allowed lateness of the spec's streams. (A later
    stream with longer periods may still have its last period open: :func:`full_release_instant`
    is the instant for all of them.)"""
    lateness = max(s.allowed_lateness_seconds for s in spec.streams.values())
    return generated_end(spec, periods) + lateness


def full_release_instant(spec: EngineSpec, periods: int) -> float:
    """The public instant at which every generated event's period is due in every stream: per
    stream, the close (end plus allowed lateness) of its period holding the last generated
    instant; the latest over the streams, and never before :func:`release_instant`. What
    ``synth`` prints (it printed :func:`release_instant`: a hospital spec's monthly stream
    still had its month open at that instant)."""
    end = generated_end(spec, periods)
    closes = [release_instant(spec, periods)]
    for stream in spec.streams.values():
        clock = PeriodClock(stream.period)
        last = clock.index_of(math.nextafter(end, -math.inf))  # the period holding the end's eve
        closes.append(clock.bounds(last)[1] + stream.allowed_lateness_seconds)
    return max(closes)


def periods_within_horizons(spec: EngineSpec, periods: int) -> int:
    """The most of ``periods`` generated periods whose events every stream that stops at its
    horizon (``on_epoch_end = "stop"``) still counts: the rest would all be refused as
    ``after_horizon``."""
    allowed = periods
    for stream in spec.streams.values():
        if stream.on_epoch_end != "stop":
            continue
        clock = PeriodClock(stream.period)
        low, high = 0, allowed  # the largest n whose last instant lies within the horizon
        while low < high:
            middle = (low + high + 1) // 2
            last = clock.index_of(math.nextafter(generated_end(spec, middle), -math.inf))
            low, high = (middle, high) if last < stream.horizon else (low, middle - 1)
        allowed = low
    return allowed


def beyond_future_limit(spec: EngineSpec, periods: int) -> float | None:
    """An instant every stream of ``spec`` refuses as too far ahead (or past its horizon) at
    :func:`release_instant` (and at any earlier arrival instant): one second into the period
    after the one holding that instant plus the stream's ``max_future_periods``, the latest
    over the streams. None when a stream has no future limit (``max_future_periods = 0``)."""
    if any(s.max_future_periods == 0 for s in spec.streams.values()):
        return None
    now = release_instant(spec, periods)
    starts = []
    for stream in spec.streams.values():
        clock = PeriodClock(stream.period)
        starts.append(clock.bounds(clock.index_of(now) + stream.max_future_periods + 1)[0])
    return max(starts) + 1.0


def _future_reason(spec: EngineSpec, ts: float) -> str:
    """The reason a record dated ``ts`` beyond every stream's future limit is refused with:
    ``after_horizon`` when a stopping stream's horizon is past (checked first), else
    ``too_far_in_future``."""
    for stream in spec.streams.values():
        if stream.on_epoch_end == "stop" and PeriodClock(stream.period).index_of(ts) >= (
            stream.horizon
        ):
            return "after_horizon"
    return "too_far_in_future"


def _maker(
    scenario: str, spec: EngineSpec, rng: np.random.Generator, *, expected_events: float = 0.0
) -> Any:
    stream = next(iter(spec.streams.values()))
    if scenario == "restaurant":
        combos = [
            dict(zip(stream.counters.items, v, strict=True)) for _, v in stream.constraints.combos
        ]
        orders = [{k: q for k, q in c.items() if q} for c in combos]
        weights = np.array([0.5, 0.3, 0.2])[: len(orders)]
        weights = weights / weights.sum()

        def order() -> dict[str, Any]:
            return {"items": dict(orders[int(rng.choice(len(orders), p=weights))])}

        return order
    attributes = [a for s in spec.streams.values() for a in s.counters.attributes]
    if scenario == "hiv":
        attributes = []
    # skewed category distributions so cells differ
    dists = []
    for a in attributes:
        w = rng.dirichlet(np.full(len(a.categories), 2.0))
        dists.append((a.name, a.categories, w))

    def person() -> dict[str, Any]:
        attrs: dict[str, Any] = {
            name: cats[int(rng.choice(len(cats), p=w))] for name, cats, w in dists
        }
        attrs["hiv_positive"] = bool(rng.uniform() < 0.03)
        return {"attributes": attrs}

    if scenario == "hospital-patients":
        return _patients(person, rng, expected_events)
    places = next((s.counters for s in spec.streams.values() if s.counters.places), None)
    if places is not None:
        return _at_places(person, rng, places.places, places.place_field)
    return person


def _at_places(person: Any, rng: np.random.Generator, places: Any, field: str) -> Any:
    """Records at a leaf place, drawn in proportion to the synthetic population of
    :func:`~streamdp.synth.geography.synthetic_counties` (leaves it does not name weigh as
    its median county)."""
    leaves = [places.ids[i] for i in places.tree.leaves.tolist()]
    population = {p.node: p.population for p in synthetic_counties()}
    median = float(np.median(list(population.values())))
    weights = np.array([population.get(leaf, median) for leaf in leaves], dtype=np.float64)
    cumulative = np.cumsum(weights / weights.sum())

    def resident() -> dict[str, Any]:
        record: dict[str, Any] = person()
        pick = min(int(np.searchsorted(cumulative, rng.uniform())), len(leaves) - 1)
        record["attributes"][field] = leaves[pick]
        return record

    return resident


def _patients(person: Any, rng: np.random.Generator, expected_events: float) -> Any:
    """Admissions of a pool of returning patients: each patient has a Pareto(``PATIENT_TAIL``)
    propensity to be admitted, so visits per patient are heavy tailed; a patient keeps the
    attributes of their first admission except the ward."""
    pool = max(20, int(expected_events / ADMISSIONS_PER_PATIENT))
    propensity = rng.pareto(PATIENT_TAIL, size=pool) + 1.0
    chance = propensity / propensity.sum()
    known: dict[int, dict[str, Any]] = {}

    def admission() -> dict[str, Any]:
        patient = int(rng.choice(pool, p=chance))
        fresh = person()
        attrs = dict(known.setdefault(patient, fresh["attributes"]))
        if "ward" in fresh["attributes"]:
            attrs["ward"] = fresh["attributes"]["ward"]
        return {"patient_id": f"p{patient:06d}", "attributes": attrs}

    return admission


def _bad(  # noqa: PLR0917
    kind: str,
    good: dict[str, Any],
    clock: PeriodClock,
    j: int,
    stream: StreamSpec,
    number: int,
) -> str:
    bad = dict(good)
    bad["event_id"] = f"bad-{number}-{kind}"
    hi = clock.bounds(j)[1]
    if kind == "malformed":
        return '{"event_id": "broken", "items": {' if "items" in good else "\x00not json"
    if kind == "schema_violation":
        del bad["event_id"]
    elif kind == "bad_timestamp":
        bad["event_time"] = "2024-13-45 25:61"
    elif kind == "unknown_source":
        bad["source"] = "no-such-source"
    elif kind == "duplicate_event":
        return json.dumps(good)
    elif kind == "before_start":
        bad["event_time"] = format_instant(clock.bounds(0)[0] - 86400.0 * 40)
    elif kind == "control_on_input":
        control = {"type": "control", "action": "close", "stream": stream.name, "through": hi}
        return json.dumps(control)
    elif kind == "unknown_item":
        bad["items"] = {"pizza": 1}
    elif kind == "invalid_quantity":
        bad["items"] = {stream.counters.items[0]: -1}
    elif kind == "not_a_combo":
        bad["items"] = {stream.counters.items[0]: 1}
    elif kind == "contribution_over_sensitivity":
        bad["items"] = {k: 3 * q for k, q in good["items"].items()}
    elif kind == "unknown_category":
        attrs = dict(good["attributes"])
        first = next(iter(a.name for a in stream.counters.attributes), None)
        attrs[first or "sex"] = "unknown-category"
        attrs["hiv_positive"] = "unknown-category"  # flag streams reject it too
        bad["attributes"] = attrs
    return json.dumps(bad)
