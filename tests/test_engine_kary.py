"""The k-ary mechanisms (kary_gls, kary_digits) through the engine and the replay (issue 13).

- a TOML spec with ``mechanism = "kary_gls"`` / ``"kary_digits"`` replays: releases carry the
  strategy's exact standard deviations, GLS releases are real numbers, digits releases integers;
- the declared standard deviations are what the noise does: many seeded runs on fixed data,
  the empirical variance of every period's released count and total against the declared one
  (and the same test rejects a declaration off by 1.5x);
- with public constraints the releases are consistent when published (the node noise is
  projected), the consistent records repeat them, and no period is published twice.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from stats_continual import P_THRESHOLD, variance_z_pvalue

from streamdp.continual.factored_noise import level_scales
from streamdp.continual.strategy import build_any_strategy
from streamdp.engine import ConsistentRecord, Engine, ReleaseRecord, parse_spec
from streamdp.engine.periods import parse_instant
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.revision import project_nodes
from streamdp.noise import InsecureSeededSampler
from streamdp.noise.sampler import discrete_laplace_variance

DAY = 86400.0
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
ITEMS_SPEC = """
[sources.orders]
topic = "orders"
kind = "order"
epsilon_cap = 1.0

[streams.items]
source = "orders"
epsilon = 1.0
sensitivity = 3
horizon = {horizon}
mechanism = "{mechanism}"
branching = 3
on_epoch_end = "roll"
period = {{ unit = "day", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "items", items = ["a", "b", "c"] }}
consistency = {{ every_periods = 7, at_epoch_end = true }}
{constraints}
"""
COMBOS = """
[streams.items.constraints]
kind = "combos"
orders_must_be_combos = {must}

[streams.items.constraints.combos]
one = {{ a = 1, b = 1 }}
two = {{ b = 1, c = 2 }}
"""


def _example(name: str, mechanism: str) -> Any:
    """A packaged example spec (horizon 120) whose stream uses ``mechanism``."""
    text = importlib.resources.files("streamdp").joinpath("examples", f"{name}.toml")
    return parse_spec(
        text.read_text("utf-8").replace(
            "horizon = 120\n", f'horizon = 120\nmechanism = "{mechanism}"\n'
        )
    )


def _items_spec(mechanism: str = "kary_gls", horizon: int = 40, combos: bool | None = None) -> Any:
    constraints = "" if combos is None else COMBOS.format(must=str(combos).lower())
    return parse_spec(
        ITEMS_SPEC.format(mechanism=mechanism, horizon=horizon, constraints=constraints)
    )


def _orders(days: int, combos: bool = False) -> tuple[list[bytes], np.ndarray]:
    """Fixed orders over ``days`` days and their exact per-day item counts ``(days, 3)``."""
    rng = np.random.default_rng(7)
    lines: list[bytes] = []
    exact = np.zeros((days, 3), dtype=np.int64)
    shapes = [{"a": 1, "b": 1}, {"b": 1, "c": 2}] if combos else [{"a": 1}, {"b": 2}, {"c": 1}]
    for day in range(days):
        for n in range(int(rng.integers(0, 4))):
            items = shapes[int(rng.integers(0, len(shapes)))]
            for name, q in items.items():
                exact[day, "abc".index(name)] += q
            when = 1704067200 + day * DAY + 3600 * (n + 1)
            stamp = np.datetime_as_string(np.datetime64(int(when), "s")) + "Z"
            event = {"event_id": f"o{day}-{n}", "event_time": stamp, "source": "orders"}
            lines.append(json.dumps({**event, "items": items}).encode())
    return lines, exact


def _run(spec: Any, lines: list[bytes], days: int, seed: int) -> list[Any]:
    engine = Engine(spec, sampler=InsecureSeededSampler(seed), batch=True)
    as_of = 1704067200 + days * DAY
    engine.start_batch(as_of)
    for offset, line in enumerate(lines, start=1):
        assert engine.ingest(line, offset=offset).accepted
    return engine.advance_clock(as_of)


def _exact_stds(
    mechanism: str,
    horizon: int,
    sensitivity: int,
    branching: int | None = None,
    projected_width: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per period ``(count std, total std)`` declared for the strategy: its exact variances'
    sds plus the fixed-point rounding bound (epoch 0, no projection)."""
    strategy = build_any_strategy(mechanism, "total", horizon, branching)
    scales = np.asarray(level_scales(strategy, 1.0, sensitivity))[strategy.node_levels]
    node_var = np.array([discrete_laplace_variance(b) for b in scales])
    # the declared stds add the public bound on the fixed-point rounding of the GLS decoder
    # (zero for the integer negative digits), to the exact sd times a 2^-40 float slack
    rounding = strategy.rounding_bound()
    if projected_width is not None:  # before sqrt(P_jj): |(P r)_j| <= sqrt(P_jj width) max|r|
        rounding *= np.sqrt(projected_width)
    slack = 1.0 + 2.0**-40 if rounding else 1.0
    return (
        np.sqrt(strategy.count_variances(node_var)) * slack + 2 * rounding,
        np.sqrt(strategy.total_variances(node_var)) * slack + rounding,
    )


@pytest.mark.parametrize("mechanism", ["kary_gls", "kary_digits"])
def test_replay_of_a_kary_spec_releases_with_the_strategys_exact_stds(
    mechanism: str, tmp_path: Path
) -> None:
    spec = _example("hiv", mechanism)
    assert spec.streams["hiv-monthly"].mechanism == mechanism
    events = [
        {
            "event_id": f"p{i}",
            "event_time": f"2024-{1 + i % 6:02d}-{1 + i % 27:02d}T08:00:00Z",
            "source": "admissions",
            "hiv_positive": i % 3 == 0,
        }
        for i in range(90)
    ]
    source = tmp_path / "admissions.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    as_of = parse_instant("2024-07-03T00:00:00Z")
    assert as_of is not None
    summary = replay(spec, source, tmp_path / "out", as_of=as_of, sampler=InsecureSeededSampler(3))
    assert summary.periods_released == {"hiv-monthly": 6}
    releases = read_jsonl(tmp_path / "out" / "releases.jsonl")
    assert [r["period"] for r in releases] == [1, 2, 3, 4, 5, 6]
    count_std, total_std = _exact_stds(mechanism, 120, 1)
    exact = np.zeros(6, dtype=np.int64)
    for e in events:
        exact[int(e["event_time"][5:7]) - 1] += int(e["hiv_positive"])
    for r in releases:
        t = r["period"]
        assert r["mechanism"] == mechanism
        assert r["count_std"] == pytest.approx(count_std[t - 1], rel=1e-12)
        assert r["total_std"] == pytest.approx(total_std[t - 1], rel=1e-12)
    kinds = {type(r["noisy_total"]) for r in releases} | {type(r["noisy_count"]) for r in releases}
    # GLS releases are real numbers (rounding would change their variance); digits: integers
    assert kinds == ({float} if mechanism == "kary_gls" else {int})
    counts = np.array([r["noisy_count"] for r in releases])
    totals = np.array([r["noisy_total"] for r in releases])
    np.testing.assert_allclose(np.cumsum(counts), totals, rtol=0, atol=1e-9)
    assert not np.allclose(totals, np.cumsum(exact))  # noise was added
    # the replay's closing revision publishes each released period once, equal to its release
    consistent = read_jsonl(tmp_path / "out" / "consistent.jsonl")
    assert [c["period"] for c in consistent] == [1, 2, 3, 4, 5, 6]
    for name, records in (("release", releases), ("consistent", consistent)):
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))
        for record in records:
            jsonschema.validate(record, schema)
    for c, r in zip(consistent, releases, strict=True):
        assert c["counts"] == {r["counter"]: r["noisy_count"]}
        assert c["totals"] == {r["counter"]: r["noisy_total"]}
        assert c["count_std"] == {r["counter"]: r["count_std"]}
        assert c["total_std"] == {r["counter"]: r["total_std"]}


def _deviations(
    spec: Any, lines: list[bytes], exact: np.ndarray, seeds: range
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Released minus exact count and total per (seed, period, counter), with the declared
    standard deviations per (period, counter) (identical in every run)."""
    days = exact.shape[0]
    totals = np.cumsum(exact, axis=0)
    d_count = np.zeros((len(seeds), days, 3))
    d_total = np.zeros((len(seeds), days, 3))
    std_count = np.zeros((days, 3))
    std_total = np.zeros((days, 3))
    for k, seed in enumerate(seeds):
        for r in _run(spec, lines, days, seed):
            if isinstance(r, ReleaseRecord):
                t, c = r.period - 1, "abc".index(r.counter)
                d_count[k, t, c] = r.noisy_count - exact[t, c]
                d_total[k, t, c] = r.noisy_total - totals[t, c]
                if k == 0:
                    std_count[t, c], std_total[t, c] = r.count_std, r.total_std
                else:
                    assert (std_count[t, c], std_total[t, c]) == (r.count_std, r.total_std)
    return d_count, d_total, std_count, std_total


def _variance_checks(
    deviations: np.ndarray, stds: np.ndarray
) -> tuple[list[float], list[float], list[float]]:
    """Per period, the deviations of all counters divided by their declared stds (counters
    are independent): p-values of variance 1 (the declaration), 1.5 and 1/1.5 (declarations
    off by that factor, which the same test must reject), and last, the same three for the
    mean standardised square over all periods and counters of each run (runs independent)."""
    standard = deviations / stds
    right, high, low = [], [], []
    for d in [standard[:, t, :].ravel() for t in range(standard.shape[1])]:
        right.append(variance_z_pvalue(d, 1.0))
        high.append(variance_z_pvalue(d, 1.5))
        low.append(variance_z_pvalue(d, 1 / 1.5))
    per_run = np.sqrt((standard**2).mean(axis=(1, 2)))  # its square's mean is the run's mean
    right.append(variance_z_pvalue(per_run, 1.0))
    high.append(variance_z_pvalue(per_run, 1.5))
    low.append(variance_z_pvalue(per_run, 1 / 1.5))
    return right, high, low


def test_simulation_confirms_the_declared_stds_of_a_kary_gls_stream() -> None:
    """400 seeded runs of a 40-day kary_gls stream (k = 3, three counters, fixed orders):
    the released counts and totals scatter around the exact ones with the variance each
    release declares (per period, and pooled over the whole run; Bonferroni over the 82
    checks; the declared stds equal the strategy's exact ones). Power: declaring 1.5x more or
    less is rejected by the pooled check and for most periods by the same test."""
    spec = _items_spec("kary_gls", horizon=40)
    lines, exact = _orders(40)
    d_count, d_total, std_count, std_total = _deviations(spec, lines, exact, range(400))
    count_std, total_std = _exact_stds("kary_gls", 40, 3, branching=3)
    np.testing.assert_allclose(std_count, np.repeat(count_std[:, None], 3, axis=1), rtol=1e-12)
    np.testing.assert_allclose(std_total, np.repeat(total_std[:, None], 3, axis=1), rtol=1e-12)
    alpha = 1e-3 / 82  # family-wise 1e-3 over 2 x 41 checks
    for deviations, stds in ((d_count, std_count), (d_total, std_total)):
        right, high, low = _variance_checks(deviations, stds)
        assert min(right) > alpha, min(right)
        assert max(high[-1], low[-1]) < P_THRESHOLD  # the pooled check has ample power
        assert np.mean(np.array(high[:-1]) < alpha) > 0.9  # and so do most periods
        assert np.mean(np.array(low[:-1]) < alpha) > 0.9
        # unbiased: the mean deviation is within 5 standard errors everywhere
        se = stds / np.sqrt(deviations.shape[0])
        assert np.all(np.abs(deviations.mean(axis=0)) < 5 * se)


def test_simulation_confirms_the_projected_stds_of_a_kary_stream_with_combos() -> None:
    """With combos every order must follow, each release is exact + P n: consistent when
    published, declared std sqrt(P_jj) x the strategy's, confirmed by 400 seeded runs."""
    spec = _items_spec("kary_gls", horizon=12, combos=True)
    stream = spec.streams["items"]
    lines, exact = _orders(12, combos=True)
    d_count, d_total, std_count, std_total = _deviations(spec, lines, exact, range(400))
    shrink = np.clip(np.diag(project_nodes(stream, np.eye(3))), 0, 1)
    assert shrink.max() < 1.0  # the projection removes noise
    count_std, total_std = _exact_stds("kary_gls", 12, 3, branching=3, projected_width=3)
    np.testing.assert_allclose(std_count, np.sqrt(np.outer(count_std**2, shrink)), rtol=1e-9)
    np.testing.assert_allclose(std_total, np.sqrt(np.outer(total_std**2, shrink)), rtol=1e-9)
    # every run's deviations lie in the combo span (exact counts already do)
    flat = d_total.reshape(-1, 3)
    np.testing.assert_allclose(project_nodes(stream, flat), flat, atol=1e-8)
    alpha = 1e-3 / 26
    for deviations, stds in ((d_count, std_count), (d_total, std_total)):
        right, high, low = _variance_checks(deviations, stds)
        assert min(right) > alpha, min(right)
        assert max(high[-1], low[-1]) < P_THRESHOLD
        assert np.mean(np.array(high[:-1]) < alpha) > 0.9
        assert np.mean(np.array(low[:-1]) < alpha) > 0.9


@pytest.mark.parametrize("mechanism", ["kary_gls", "kary_digits"])
def test_kary_releases_with_combos_are_consistent_at_publication(mechanism: str) -> None:
    """Releases lie in the combo span when published; every period's consistent record
    (published with the revision schedule: every 7 periods and at each epoch end) equals its
    releases and standard deviations, and no period is published twice, across epochs."""
    spec = _items_spec(mechanism, horizon=10, combos=True)
    stream = spec.streams["items"]
    lines, _ = _orders(25, combos=True)
    out = _run(spec, lines, 25, seed=5)
    releases: dict[tuple[int, int], dict[str, ReleaseRecord]] = {}
    consistent: list[ConsistentRecord] = []
    for r in out:
        if isinstance(r, ReleaseRecord):
            releases.setdefault((r.epoch, r.period), {})[r.counter] = r
        else:
            consistent.append(r)
    assert len(releases) == 25
    for by_counter in releases.values():
        vector = np.array([[by_counter[c].noisy_total for c in "abc"]])
        np.testing.assert_allclose(project_nodes(stream, vector), vector, atol=1e-8)
    # schedule: periods 7 and 10 (epoch end), 14, 20 (epoch end) and 21
    revisions = sorted({(c.revision, c.periods_covered) for c in consistent})
    assert revisions == [(1, 7), (2, 10), (3, 14), (4, 20), (5, 21)]
    keys = [(c.epoch, c.period) for c in consistent]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys)) == 21
    for c in consistent:
        by_counter = releases[(c.epoch, c.period)]
        assert c.counts == {n: r.noisy_count for n, r in by_counter.items()}
        assert c.totals == {n: r.noisy_total for n, r in by_counter.items()}
        assert c.count_std == {n: r.count_std for n, r in by_counter.items()}
        assert c.total_std == {n: r.total_std for n, r in by_counter.items()}


def test_orders_that_need_not_be_one_combo_stay_in_the_span_and_are_projected_when_published() -> (
    None
):
    """``orders_must_be_combos = false`` admits orders that are sums of combos and refuses the
    rest (``not_a_combo``, checked exactly): the exact counts stay in the combos' span, so the
    releases are projected onto it when published, as with single combos. (Before, any order
    was counted and the revisions projected onto a span the counts had left: a biased revision
    with a false standard deviation, 0 for an item in no combo.)"""
    constraints = COMBOS.format(must="false")
    text = ITEMS_SPEC.format(mechanism="kary_gls", horizon=10, constraints=constraints)
    spec = parse_spec(text.replace("sensitivity = 3", "sensitivity = 5"))
    stream = spec.streams["items"]
    engine = Engine(spec, sampler=InsecureSeededSampler(2), batch=True)
    as_of = 1704067200 + 10 * DAY
    engine.start_batch(as_of)
    orders = [{"a": 1, "b": 2, "c": 2}, {"a": 2, "b": 2}, {"b": 1, "c": 2}]  # 1+2, 2x1, 2
    outside = [{"a": 1}, {"c": 1}, {"a": 1, "b": 1, "c": 1}]
    for n, items in enumerate(orders + outside):
        event = {"event_id": f"o{n}", "event_time": "2024-01-02T10:00:00Z", "items": items}
        result = engine.ingest(json.dumps({**event, "source": "orders"}).encode(), offset=n + 1)
        if items in orders:
            assert result.accepted, items
        else:
            assert [d.reason for d in result.dead_letters] == ["not_a_combo"], items
    out = engine.advance_clock(as_of)
    rel = [r for r in out if isinstance(r, ReleaseRecord)]
    totals = np.array([[r.noisy_total for r in rel if r.period == t] for t in range(1, 11)])
    np.testing.assert_allclose(project_nodes(stream, totals), totals, atol=1e-6)
    shrink = np.diag(project_nodes(stream, np.eye(3)))
    stds = {r.counter: r.total_std for r in rel if r.period == 4}
    assert len(set(stds.values())) > 1  # each counter scaled by its sqrt(P_jj)
    assert [stds[n] for n in "abc"] == pytest.approx(
        list(stds["b"] / np.sqrt(shrink[1]) * np.sqrt(shrink))
    )


def test_census_kary_releases_satisfy_the_hierarchy_when_published() -> None:
    """The census stream (355 counters) with kary_gls: every period's released totals obey
    total = each marginal's sum = the cells' sum, with per-counter stds sqrt(P_jj) x the
    strategy's (each including the projected fixed-point rounding bound)."""
    from streamdp.synth import generate

    spec = _example("census", "kary_gls")
    stream = spec.streams["census"]
    engine = Engine(spec, sampler=InsecureSeededSampler(8), batch=True)
    as_of = parse_instant("2024-05-03T00:00:00Z")
    assert as_of is not None
    engine.start_batch(as_of)
    for offset, line in enumerate(generate("census", 4, 30.0, seed=2, spec=spec), start=1):
        engine.ingest(line.text.encode(), offset=offset)
    out = engine.advance_clock(as_of)
    releases = [r for r in out if isinstance(r, ReleaseRecord)]
    names = list(stream.counters.names)
    assert len(releases) == 4 * len(names) == 4 * 355
    shrink = np.clip(np.diag(project_nodes(stream, np.eye(len(names)))), 0, 1)
    count_std, total_std = _exact_stds("kary_gls", 120, 5, projected_width=len(names))
    for t in range(1, 5):
        by_name = {r.counter: r for r in releases if r.period == t}
        row = np.array([[by_name[n].noisy_total for n in names]])
        np.testing.assert_allclose(project_nodes(stream, row), row, atol=1e-6)
        stds = np.array([by_name[n].total_std for n in names])
        np.testing.assert_allclose(stds, total_std[t - 1] * np.sqrt(shrink), rtol=1e-12)
        stds = np.array([by_name[n].count_std for n in names])
        np.testing.assert_allclose(stds, count_std[t - 1] * np.sqrt(shrink), rtol=1e-12)
    assert len({r.noisy_total for r in releases}) > 1000  # real numbers, not rounded


def test_readers_show_real_valued_releases(tmp_path: Path) -> None:
    """A kary_gls release (real numbers) is read by the feed, the demo board and tail, not
    dropped or truncated to an integer."""
    from streamdp.demo.board import Board
    from streamdp.feed.records import parse_release
    from streamdp.record_words import describe_record

    spec = _example("hiv", "kary_gls")
    engine = Engine(spec, sampler=InsecureSeededSampler(0))
    out = engine.close("hiv-monthly", 1706745600.0)  # January 2024 closes
    record = next(r for r in out if isinstance(r, ReleaseRecord)).to_dict()
    assert isinstance(record["noisy_total"], float)
    assert not float(record["noisy_total"]).is_integer()
    release = parse_release(json.loads(json.dumps(record)))
    assert release is not None
    assert release.noisy_total == record["noisy_total"]
    board = Board(spec)
    board.add(record)
    cell = board.streams["hiv-monthly"].periods[(0, 1)]["hiv_positive_admissions"]
    assert cell.total == record["noisy_total"]
    assert any(f"{record['noisy_total']:,.0f}" in line for line in board.updates())
    described = describe_record(record)
    assert described is not None
    assert f"{record['noisy_total']:,.1f}" in described


def test_revisions_projecting_releases_give_each_period_the_same_bits_however_grouped() -> None:
    """Issue 25: a revision of the places tree under kary_gls projects the released values;
    the same period revised alone (an on-demand revision after every day) or with others (the
    schedule) must publish the same float, bit for bit (a matrix product may sum in another
    order by shape)."""
    from dataclasses import replace

    from places_fixture import small_county_spec

    from streamdp.synth import generate

    base = small_county_spec()
    (name, stream) = next(iter(base.streams.items()))
    spec = replace(base, streams={name: replace(stream, mechanism="kary_gls", horizon=10)})
    lines = [
        line.text.encode() for line in generate("county-admissions", 10, 6.0, seed=3, spec=spec)
    ]
    start = parse_instant("2024-01-01T00:00:00Z")
    assert start is not None
    late = start + 10 * DAY + stream.allowed_lateness_seconds

    def consistent(each_day: bool) -> dict[tuple[int, int], dict[str, float]]:
        engine = Engine(spec, sampler=InsecureSeededSampler(5), batch=True)
        engine.start_batch(late)
        for offset, line in enumerate(lines, start=1):
            assert engine.ingest(line, offset=offset).accepted
        out: list[Any] = []
        for day in range(1, 11) if each_day else [10]:
            out += engine.advance_clock(start + day * DAY + stream.allowed_lateness_seconds)
            if each_day:
                out += engine.revise(name)
        merged: dict[tuple[int, int], dict[str, float]] = {}
        for r in out:
            if isinstance(r, ConsistentRecord):
                merged.setdefault((r.epoch, r.period), {}).update(r.totals)
        return merged

    alone, grouped = consistent(True), consistent(False)
    assert sorted(alone) == sorted(grouped) == [(0, t) for t in range(1, 11)]
    for key, totals in grouped.items():
        assert {n: float(v).hex() for n, v in alone[key].items()} == {
            n: float(v).hex() for n, v in totals.items()
        }, key
