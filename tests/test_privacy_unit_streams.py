"""Streams that protect a person (issue 28): a privacy unit with contribution bounds, end to end.

The unit-level neighbouring check: D and D plus every admission of one patient (50 of them,
hostile ones included: an exact duplicate, one stamped far ahead, one arriving after its period
closed, several on one day) run with the same seeded noise, so the noise cancels and any
difference is the patient's own effect. On both paths (the file replay and the daemon's
release service over a state table, with a restart in the middle) we assert the release
schedule is identical and, per stream and epoch, the released counts move in L1 by at most the
declared unit sensitivity (``sensitivity`` in the records: M x one event's), and, with budget
shares per attribute group (``+weights``), the loss summed over the groups is at most the
stream's epsilon (measured tight: the hostile patient spends exactly 0.5 of 0.5). The check has
power: the same patient moves a flag stream by exactly M x Delta, and by every admission when
the stream protects events only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from service_steps import apply_writes as _apply

from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine import Engine, EngineSpec
from streamdp.engine.budget_groups import budget_groups, group_epsilon, group_sensitivity
from streamdp.engine.periods import format_instant, parse_instant
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.spec_loading import parse_spec
from streamdp.errors import ConfigError, StateError
from streamdp.noise import InsecureSeededSampler

SEED = 41
KEY = b"unit-key-for-tests-0123456789ab"
DAY = 86400.0
START = parse_instant("2024-01-01T00:00:00Z") or 0.0
DAYS = 20
WINDOW = 6 * 3600.0  # the daemon reads records in windows of six hours of its clock
PATIENT = "patient-hostile"

SOURCE_PURE = """
[sources.adm]
topic = "adm"
kind = "person"
epsilon_cap = 1.0
"""
SOURCE_ZCDP = """
[sources.adm]
topic = "adm"
kind = "person"
rho_cap = 1.0
"""
STREAMS = """
[streams.hiv]
source = "adm"
{budget}
sensitivity = 1
horizon = 10
mechanism = "{mechanism}"
max_future_periods = 3
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive", name = "hiv" }}
consistency = {{ every_periods = 0, at_epoch_end = true }}
{unit_hiv}

[streams.census]
source = "adm"
{budget}
sensitivity = 4
horizon = 30
mechanism = "{mechanism}"
max_future_periods = 3
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "attributes", attributes = [
    {{ name = "sex", categories = ["f", "m"] }},
    {{ name = "ward", categories = ["a", "b"] }},
]{weights} }}
constraints = {{ kind = "hierarchy" }}
consistency = {{ every_periods = 0, at_epoch_end = true }}
{unit_census}
"""
UNIT_HIV = (
    'privacy_unit = { field = "patient_id", max_events_per_period = 2, max_periods_per_epoch = 3 }'
)
UNIT_CENSUS = (
    'privacy_unit = { field = "patient_id", max_events_per_period = 1, max_periods_per_epoch = 4 }'
)
#: "+weights": the census stream's total, marginals and cells each their own budget share
MECHANISMS = ["fda", "kary_gls", "zcdp+binary", "zcdp+blt", "fda+weights", "zcdp+binary+weights"]
WEIGHTS = ", attribute_weights = {{ total = 1, sex = 1, ward = 2, cells = 4 }}"


def _spec(mechanism: str, *, units: bool = True) -> EngineSpec:
    weighted = mechanism.endswith("+weights")
    definition, _, name = mechanism.removesuffix("+weights").rpartition("+")
    zcdp = definition == "zcdp"
    text = (SOURCE_ZCDP if zcdp else SOURCE_PURE) + STREAMS.format(
        budget='privacy = { definition = "zcdp", rho = 0.25 }' if zcdp else "epsilon = 0.5",
        mechanism=name,
        unit_hiv=UNIT_HIV if units else "",
        unit_census=UNIT_CENSUS if units else "",
        weights=WEIGHTS.format() if weighted else "",
    )
    return parse_spec(text)


def _event(n: int, ts: float, patient: str, hiv: bool, sex: str = "f") -> dict[str, Any]:
    return {
        "event_id": f"e{n}",
        "event_time": format_instant(ts),
        "source": "adm",
        "patient_id": patient,
        "attributes": {"sex": sex, "ward": "ab"[n % 2], "hiv_positive": hiv},
    }


def _background() -> list[tuple[float, str]]:
    """(arrival, record) of 30 ordinary patients, a few admissions each."""
    out = []
    n = 0
    for p in range(30):
        for visit in range(1 + p % 4):
            ts = START + ((p * 7 + visit * 5) % DAYS) * DAY + 3600.0 * (1 + (p + visit) % 20)
            out.append((ts + 60.0, json.dumps(_event(n, ts, f"p{p}", p % 3 == 0, "fm"[p % 2]))))
            n += 1
    return out


def _hostile() -> list[tuple[float, str]]:
    """50 admissions of one patient, all HIV+: many on a few days, duplicates, one far ahead,
    one arriving two days after its day closed, the rest spread over both epochs."""
    out = []
    for i in range(50):
        day = (i * 3) % DAYS if i >= 12 else i % 3  # twelve admissions on days 0-2
        ts = START + day * DAY + 600.0 * (i + 1)
        out.append((ts + 60.0, json.dumps(_event(1000 + i, ts, PATIENT, True, "m"))))
    out.append(out[20])  # an exact duplicate
    ahead = START + 15 * DAY
    out.append((START + DAY, json.dumps(_event(2000, ahead, PATIENT, True, "m"))))  # too far
    late = START + 4 * DAY + 100.0
    out.append((late + 2 * DAY, json.dumps(_event(2001, late, PATIENT, True, "m"))))  # late
    return out


def _records(with_patient: bool) -> list[tuple[float, str]]:
    records = _background() + (_hostile() if with_patient else [])
    return sorted(records, key=lambda r: r[0])  # arrival order (stable for equal instants)


def _via_replay(spec: EngineSpec, records: list[tuple[float, str]], tmp: Path) -> list[Any]:
    tmp.mkdir(parents=True)
    path = tmp / "events.jsonl"
    path.write_text("".join(r + "\n" for _, r in records), encoding="utf-8")
    out = tmp / "out"
    replay(
        spec,
        path,
        out,
        as_of=START + DAYS * DAY,
        sampler=InsecureSeededSampler(SEED),
        unit_key=KEY,
    )
    return read_jsonl(out / "releases.jsonl") + read_jsonl(out / "consistent.jsonl")


def _via_daemon(
    spec: EngineSpec,
    records: list[tuple[float, str]],
    *,
    restart_after: int | None = None,
    state: dict[str, Any] | None = None,
) -> list[Any]:
    """The release service over a dict state table, records batched by windows of the clock;
    with ``restart_after``, a new service is loaded from the table after that many windows."""
    table: dict[str, Any] = {} if state is None else state
    now = [0.0]

    def service() -> ReleaseService:
        return ReleaseService(
            spec,
            sampler=InsecureSeededSampler(SEED),
            state=table,
            clock=lambda: now[0],
            unit_key=KEY,
        )

    running = service()
    windows: dict[int, list[InputRecord]] = defaultdict(list)
    for offset, (arrival, text) in enumerate(records):
        windows[int(arrival // WINDOW)].append(InputRecord("adm", 0, offset, b"adm", text.encode()))
    published: list[Any] = []
    last = int((START + DAYS * DAY) // WINDOW)
    for done, window in enumerate(range(min(windows), last + 1)):
        if restart_after is not None and done == restart_after:
            running = service()  # a restart: everything comes back from the table
        now[0] = (window + 1) * WINDOW
        for outcome in (running.process(windows.get(window, [])), running.tick()):
            _apply(table, outcome.writes)
            published += [json.loads(p.value) for p in outcome.publications]
            _apply(table, outcome.cleanup)
    return [p for p in published if p.get("kind") != "dead_letter"]


def _moves(
    base: list[Any], other: list[Any]
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int, int], float]]:
    """Per (stream, epoch), the L1 change of the released period counts over every counter;
    per (stream, epoch, period), that of the running totals."""
    assert [o["key"] for o in base] == [o["key"] for o in other], "the schedule moved"
    changed = {o["key"]: o for o in other if o["kind"] == "release"}
    counts: dict[tuple[str, int], float] = defaultdict(float)
    totals: dict[tuple[str, int, int], float] = defaultdict(float)
    for a in (o for o in base if o["kind"] == "release"):
        b = changed[a["key"]]
        counts[(a["stream"], a["epoch"])] += abs(a["noisy_count"] - b["noisy_count"])
        totals[(a["stream"], a["epoch"], a["period"])] += abs(a["noisy_total"] - b["noisy_total"])
    return counts, totals


def _assert_within_unit_sensitivity(spec: EngineSpec, base: list[Any], other: list[Any]) -> None:
    counts, totals = _moves(base, other)
    assert counts, "nothing was released"
    # float mechanisms decode the same noise to within rounding; BLT adds its declared bias
    slack = 0.05 if any(s.mechanism == "blt" for s in spec.streams.values()) else 1e-6
    for (stream, epoch), l1 in counts.items():
        bound = spec.streams[stream].noise_sensitivity
        assert l1 <= bound + slack, f"{stream} epoch {epoch}: counts moved {l1} > {bound}"
    for (stream, epoch, period), l1 in totals.items():
        bound = spec.streams[stream].noise_sensitivity * (epoch + 1)  # the epochs so far
        assert l1 <= bound + slack, f"{stream} {epoch}/{period}: totals moved {l1} > {bound}"
    # budget groups (pure DP): what the unit moved in each group, over the group's unit-level
    # bound, times its epsilon, adds up to at most the stream's epsilon per epoch
    changed = {o["key"]: o for o in other if o["kind"] == "release"}
    loss: dict[tuple[str, int], float] = defaultdict(float)
    for a in (o for o in base if o["kind"] == "release"):
        stream = spec.streams[a["stream"]]
        if stream.rho is not None:
            continue
        for group in budget_groups(stream):
            if group.start <= a["counter_index"] < group.stop:
                moved = abs(a["noisy_count"] - changed[a["key"]]["noisy_count"])
                rate = group_epsilon(stream, group) / group_sensitivity(stream, group)
                loss[(a["stream"], a["epoch"])] += moved * rate
    for (stream, epoch), spent in loss.items():
        epsilon = float(spec.streams[stream].epsilon)
        assert spent <= epsilon + 1e-6, f"{stream} epoch {epoch}: loss {spent} > {epsilon}"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_one_patient_with_fifty_admissions_moves_at_most_the_unit_sensitivity_on_replay(
    mechanism: str, tmp_path: Path
) -> None:
    spec = _spec(mechanism)
    assert spec.streams["hiv"].noise_sensitivity == 6
    assert spec.streams["census"].noise_sensitivity == 16
    base = _via_replay(spec, _records(False), tmp_path / "d")
    other = _via_replay(spec, _records(True), tmp_path / "d1")
    _assert_within_unit_sensitivity(spec, base, other)
    assert all(o["sensitivity"] in (6, 16) for o in base if o["kind"] == "release")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_one_patient_with_fifty_admissions_moves_at_most_the_unit_sensitivity_in_the_daemon(
    mechanism: str,
) -> None:
    spec = _spec(mechanism)
    base = _via_daemon(spec, _records(False))
    other = _via_daemon(spec, _records(True), restart_after=30)
    _assert_within_unit_sensitivity(spec, base, other)


def test_the_check_has_power_the_patient_moves_a_flag_stream_by_exactly_m_delta(
    tmp_path: Path,
) -> None:
    """Tight, not vacuous: with the unit, the patient's admissions count up to the bounds
    (2 a day on 3 days: 6 = M x Delta in the first epoch); protecting events only, all
    of them count (far more than one event's Delta = 1)."""
    spec = _spec("fda")
    counts, _ = _moves(
        _via_replay(spec, _records(False), tmp_path / "a"),
        _via_replay(spec, _records(True), tmp_path / "b"),
    )
    assert counts[("hiv", 0)] == 6
    # epoch 1: the first three days the patient used hold 1, 2 and 2 admissions
    assert counts[("hiv", 1)] == 5
    assert counts[("census", 0)] == 16  # 1 a day on 4 days, 4 counters each
    events_only = _spec("fda", units=False)
    counts, _ = _moves(
        _via_replay(events_only, _records(False), tmp_path / "c"),
        _via_replay(events_only, _records(True), tmp_path / "e"),
    )
    assert counts[("hiv", 0)] + counts[("hiv", 1)] >= 40


@pytest.mark.parametrize("mechanism", ["fda", "zcdp+blt", "kary_gls", "fda+weights"])
def test_a_restart_keeps_every_units_counts_exact(mechanism: str) -> None:
    """Restarting from the state table at any of several points publishes exactly what an
    uninterrupted run publishes: the units' bounds survive (a lost log would let the hostile
    patient count again)."""
    spec = _spec(mechanism)
    records = _records(True)
    straight = _via_daemon(spec, records)
    for restart in (3, 9, 41, 60):
        assert _via_daemon(spec, records, restart_after=restart) == straight


def test_a_unit_log_restored_from_inside_the_hot_state_is_stored_again() -> None:
    """A hot state holding the admission logs inline (a layout the daemon reads but does not
    write) restored them, and the next checkpoint stored only what was admitted after: the
    restart after that forgot the earlier admissions, and units counted again (restart
    audit). The logs are now handed out whole at the next checkpoint, like inline ids."""
    from streamdp.daemon.checkpoint import hot_key, parse_unit_key

    spec = _spec("fda")
    table: dict[str, Any] = {}
    now = [0.0]
    windows: dict[int, list[InputRecord]] = defaultdict(list)
    for offset, (arrival, text) in enumerate(_records(True)):
        windows[int(arrival // WINDOW)].append(InputRecord("adm", 0, offset, b"adm", text.encode()))
    first = min(windows)

    def service() -> ReleaseService:
        loaded = ReleaseService(
            spec, sampler=InsecureSeededSampler(SEED), state=table, clock=lambda: now[0],
            unit_key=KEY, topic_partitions={"adm": 1},
        )  # fmt: skip
        _apply(table, loaded.assign([0]).writes)  # loads the source from the table
        return loaded

    def run(running: ReleaseService, through: range) -> None:
        for window in through:
            now[0] = (window + 1) * WINDOW
            for outcome in (running.process(windows.get(window, [])), running.tick()):
                _apply(table, outcome.writes)
                _apply(table, outcome.cleanup)

    def logs(running: ReleaseService) -> dict[str, dict[int, int]]:
        engine = running.slots["adm"].engine
        return {
            name: {j: len(log) for j, log in stream.unit_log().items()}
            for name, stream in engine.streams.items()
        }

    running = service()
    run(running, range(first, first + 10))
    before = logs(running)
    assert any(before.values())
    # the same state in the inline layout: each stream's log inside the hot state
    engine = running.slots["adm"].engine
    hot = table[hot_key("adm")]
    for name, state in hot["streams"].items():
        if state.get("units") is not None:
            state["units"]["admitted"] = [
                [j, [d.hex() for d in log]] for j, log in engine.streams[name].unit_log().items()
            ]
    for key in [k for k in table if parse_unit_key("adm", k)]:
        del table[key]
    hot["daemon"].pop("unit_chunks", None)
    restored = service()
    assert logs(restored) == before
    run(restored, range(first + 10, first + 11))
    again = logs(service())  # the restart after the checkpoint of the inline restore
    for name, periods in before.items():
        for j, n in periods.items():
            assert again[name].get(j, 0) >= n, (name, j)


def _via_two_workers(
    spec: EngineSpec, records: list[tuple[float, str]], switches: set[int]
) -> dict[str, Any]:
    """Two release services over one state table, the source's partition moving from one to
    the other before each window in ``switches`` (a rebalance: the loser drops it, the gainer
    is assigned it and reloads the source from the table). Returns the publications by key
    (a gainer may re-publish an outbox record: same key, and it must be the same record)."""
    table: dict[str, Any] = {}
    now = [0.0]
    workers = [
        ReleaseService(
            spec,
            sampler=InsecureSeededSampler(SEED),
            state=table,
            clock=lambda: now[0],
            unit_key=KEY,
            topic_partitions={"adm": 1},
        )
        for _ in range(2)
    ]
    owner = 0
    windows: dict[int, list[InputRecord]] = defaultdict(list)
    for offset, (arrival, text) in enumerate(records):
        windows[int(arrival // WINDOW)].append(InputRecord("adm", 0, offset, b"adm", text.encode()))
    published: dict[str, Any] = {}

    def apply(outcome: Any) -> None:
        _apply(table, outcome.writes)
        for publication in outcome.publications:
            record = json.loads(publication.value)
            if record.get("kind") != "dead_letter":
                assert published.setdefault(record["key"], record) == record, record["key"]
        _apply(table, outcome.cleanup)

    apply(workers[owner].assign([0]))
    last = int((START + DAYS * DAY) // WINDOW)
    for done, window in enumerate(range(min(windows), last + 1)):
        if done in switches:
            workers[owner].drop([0])
            owner = 1 - owner
            apply(workers[owner].assign([0]))
        now[0] = (window + 1) * WINDOW
        apply(workers[owner].process(windows.get(window, [])))
        apply(workers[owner].tick())
    return published


@pytest.mark.parametrize("mechanism", ["fda", "zcdp+blt", "kary_gls", "fda+weights"])
def test_a_rebalance_back_and_forth_keeps_every_units_counts_exact(mechanism: str) -> None:
    """The source's partition moves between two workers sharing the state table, and back
    (the first worker's memory is stale by then): every publication is the one a single
    worker makes. A worker that kept or lost the units' log across a move would let the
    hostile patient count again (or drop a counted admission)."""
    spec = _spec(mechanism)
    records = _records(True)
    straight = {o["key"]: o for o in _via_daemon(spec, records)}
    moved = _via_two_workers(spec, records, {5, 17, 40, 41, 66})
    assert moved == straight


def test_the_state_holds_digests_and_no_identifier_reaches_a_public_record() -> None:
    spec = _spec("fda")
    table: dict[str, Any] = {}
    published = _via_daemon(spec, _records(True)[:200], state=table)
    stored = json.dumps(table)
    assert "|unit|" in "".join(table)  # the admission log has keys of its own
    assert PATIENT not in stored
    assert "p17" not in stored.replace('"p17', "")  # no raw id (digests are hex)
    text = json.dumps(published)
    assert PATIENT not in text
    digests = {d for k, v in table.items() if "|unit|" in k for d in v}
    assert digests
    assert not any(d in text for d in digests)
    unit = published[0]["privacy_unit"]
    assert unit == {
        "field": "patient_id",
        "max_events_per_period": 2,
        "max_periods_per_epoch": 3,
        "event_sensitivity": 1,
    }


def test_a_restore_under_another_key_is_refused() -> None:
    spec = _spec("fda")
    engine = Engine(spec, sampler=InsecureSeededSampler(1), unit_key=KEY, batch=True)
    engine.start_batch(START + DAYS * DAY)
    for _, text in _records(True):
        engine.ingest(text.encode())
    snapshot = engine.snapshot()
    other = Engine(spec, sampler=InsecureSeededSampler(1), unit_key=b"another-key-0123456789")
    with pytest.raises(StateError, match="different secret key"):
        other.restore(snapshot)
    same = Engine(spec, sampler=InsecureSeededSampler(1), unit_key=KEY)
    same.restore(snapshot)
    assert same.snapshot()["streams"] == snapshot["streams"]
    # the protected drop count comes back too (a resumed replay's summary reported 0)
    assert engine.stats.dropped_over_unit_bound["hiv"] > 0
    assert same.stats.dropped_over_unit_bound == engine.stats.dropped_over_unit_bound
    # and they are not handed out again as new drops (the daemon's drop metric would count
    # them a second time after every restart)
    assert not same.take_changes().unit_drops


def test_drops_are_counted_not_dead_lettered_and_a_missing_unit_is_refused() -> None:
    spec = _spec("fda")
    engine = Engine(spec, sampler=InsecureSeededSampler(1), unit_key=KEY, batch=True)
    engine.start_batch(START + DAYS * DAY)
    results = [
        engine.ingest(json.dumps(_event(i, START + 3600.0 * (i + 1), "x", True)).encode())
        for i in range(3)
    ]
    assert [r.accepted for r in results] == [("hiv", "census"), ("hiv",), ()]
    assert not any(r.dead_letters for r in results)
    assert engine.stats.dropped_over_unit_bound == {"census": 2, "hiv": 1}
    missing = _event(9, START + 3600.0, "x", True)
    del missing["patient_id"]
    refused = engine.ingest(json.dumps(missing).encode())
    assert {d.reason for d in refused.dead_letters} == {"schema_violation"}
    assert "privacy unit" in refused.dead_letters[0].message


def test_an_engine_without_the_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="secret key"):
        Engine(_spec("fda"), sampler=InsecureSeededSampler(1))


@pytest.mark.parametrize(
    ("unit", "message"),
    [
        ('{ field = "patient_id", max_events_per_period = 2 }', "max_periods_per_epoch': missing"),
        (
            '{ field = "patient_id", max_events_per_period = 2, max_periods_per_epoch = 11 }',
            "more than the 10 periods",
        ),
        (
            '{ field = "event_id", max_events_per_period = 2, max_periods_per_epoch = 3 }',
            "name the field that identifies",
        ),
        (
            '{ field = "patient_id", max_events_per_period = 0, max_periods_per_epoch = 3 }',
            "must be >= 1",
        ),
        (
            '{ field = "patient_id", max_events_per_period = 1, max_periods_per_epoch = 1, x = 1 }',
            "unknown key",
        ),
    ],
)
def test_bad_privacy_units_are_refused_with_where_and_why(unit: str, message: str) -> None:
    text = SOURCE_PURE + STREAMS.format(
        budget="epsilon = 0.5",
        mechanism="fda",
        unit_hiv=f"privacy_unit = {unit}",
        unit_census="",
        weights="",
    )
    with pytest.raises(ConfigError, match="stream 'hiv'") as info:
        parse_spec(text)
    assert message in str(info.value)


def test_the_feed_and_its_downloads_say_per_what_the_guarantee_holds(tmp_path: Path) -> None:
    from streamdp.feed.model import RELEASE_COLUMNS, FeedView, to_csv
    from streamdp.feed.page import render_page

    spec = _spec("fda")
    view = FeedView()
    for record in _via_replay(spec, _records(True), tmp_path / "r"):
        view.add(record, record["kind"])
    streams = {s["stream"]: s for s in view.document("test")["streams"]}
    assert streams["hiv"]["protects"] == "patient_id per epoch"
    assert streams["hiv"]["unit_bounds"] == [2, 3]
    assert streams["hiv"]["sensitivity"] == 6
    csv_text = to_csv(view.release_rows(), RELEASE_COLUMNS)
    assert csv_text.splitlines()[0].endswith(
        ",protects,unit_max_events_per_period,unit_max_periods_per_epoch"
    )
    hiv_rows = [line for line in csv_text.splitlines() if line.startswith("hiv,")]
    assert hiv_rows
    assert all(r.endswith(",patient_id per epoch,2,3") for r in hiv_rows)
    page = render_page(view.document("test"))
    assert "per ${stream.protects}" in page  # the wording the page script builds


def test_status_names_the_unit_and_its_sensitivity(tmp_path: Path) -> None:
    from streamdp.daemon.runtime import WorkerRuntime
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.metrics import StreamdpMetrics

    config = tmp_path / "spec.toml"
    config.write_text("", encoding="utf-8")
    runtime = WorkerRuntime(
        DaemonSettings(config=config), _spec("fda"), InsecureSeededSampler(1), StreamdpMetrics()
    )
    hiv = runtime.status()["streams"]["hiv"]
    assert hiv["protects"] == "patient_id per epoch"
    assert hiv["sensitivity"] == 6
    assert hiv["privacy_unit"]["max_periods_per_epoch"] == 3


def test_status_gives_a_zcdp_units_lifetime_rho_as_epsilon_delta_too(tmp_path: Path) -> None:
    """Every zCDP figure is also an (epsilon, delta) one: the rho a unit could lose summed over
    the epochs (sequential) is shown with its bound at the stream's delta."""
    from streamdp.daemon.runtime import WorkerRuntime
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.engine.stream_privacy import zcdp_epsilon_bound
    from streamdp.metrics import StreamdpMetrics

    spec = _spec("zcdp+blt")
    config = tmp_path / "spec.toml"
    config.write_text("", encoding="utf-8")
    runtime = WorkerRuntime(
        DaemonSettings(config=config), spec, InsecureSeededSampler(1), StreamdpMetrics()
    )
    now = [START + DAYS * DAY]
    service = ReleaseService(
        spec, sampler=InsecureSeededSampler(SEED), state={}, clock=lambda: now[0], unit_key=KEY
    )
    batch = [
        InputRecord("adm", 0, i, b"adm", t.encode()) for i, (_, t) in enumerate(_records(False))
    ]
    service.process(batch)
    service.tick()
    runtime.service = service
    hiv = runtime.status()["streams"]["hiv"]
    rho = Decimal(hiv["rho_sequential_spent_on_source"])
    assert rho > 0
    expected = zcdp_epsilon_bound(rho, spec.streams["hiv"].delta)
    assert Decimal(hiv["epsilon_of_rho_sequential_spent_on_source"]) == expected


def test_unit_drops_reach_the_input_volume_metric_only() -> None:
    from streamdp.daemon.observation import OutcomeObserver
    from streamdp.metrics import StreamdpMetrics

    spec = _spec("fda")
    now = [START + 3 * DAY]
    service = ReleaseService(
        spec, sampler=InsecureSeededSampler(1), state={}, clock=lambda: now[0], unit_key=KEY
    )
    batch = [
        InputRecord(
            "adm",
            0,
            i,
            b"adm",
            json.dumps(_event(i, START + 3 * DAY + 60.0 * i, "z", True)).encode(),
        )
        for i in range(5)
    ]
    outcome = service.process(batch)
    assert outcome.unit_drops == {"hiv": 3, "census": 4}
    assert not outcome.dead_letters
    for volume in (True, False):
        metrics = StreamdpMetrics(input_volume=volume)
        OutcomeObserver(metrics, spec)(outcome)
        text = metrics.exposition().decode()
        assert ('streamdp_unit_bound_dropped_records_total{stream="census"} 4.0' in text) is volume
