"""Consistent revisions equal an independent dense weighted least-squares solve.

From the *released* noisy running totals only, the test recovers every epoch's noisy Fenwick
nodes (c~_t = s~_t - s~_{t & (t-1)}, s~_0 = the carried total), gets their noise variances from
the strategy weights, builds the full constraint system over all period counts (combo null
space per day; census total/marginal/cell equations per period), parametrises its null space
densely (scipy.linalg.null_space) and solves the inverse-variance weighted least squares with
numpy.linalg.lstsq. The engine's last revision must match it within 1e-9 and satisfy the
constraints within 1e-9.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from test_engine_support import consistent, drive, releases

from streamdp.continual.strategy import build_strategy
from streamdp.engine import Engine, parse_spec
from streamdp.noise import InsecureSeededSampler, discrete_laplace_variance
from streamdp.synth import example_spec, generate, release_instant


def _node_matrix(n: int) -> np.ndarray:
    """H (n x n): node i covers periods i - lowbit(i) + 1 .. i."""
    H = np.zeros((n, n))
    for i in range(1, n + 1):
        H[i - 1, i - (i & -i) : i] = 1.0
    return H


def _dense_wls(release_records, names, spec, constraint_rows) -> tuple[np.ndarray, np.ndarray]:
    """Consistent (counts, totals), shape (T, width), from released values only."""
    width = len(names)
    col = {name: k for k, name in enumerate(names)}
    by_period: dict[tuple[int, int], np.ndarray] = {}
    for r in release_records:
        by_period.setdefault((r.epoch, r.period), np.zeros(width))[col[r.counter]] = r.noisy_total
    keys = sorted(by_period)
    T = len(keys)
    strategy = build_strategy(spec.mechanism, spec.objective, spec.horizon)
    scales = spec.sensitivity / (float(spec.epsilon) * strategy.weights)
    node_var = np.array([discrete_laplace_variance(s) for s in scales])
    # observations: per epoch, noisy nodes over that epoch's periods
    rows_H, obs, weights = [], [], []
    carry = np.zeros(width)
    start = 0
    epochs = sorted({e for e, _ in keys})
    for e in epochs:
        periods = [p for ee, p in keys if ee == e]
        n = len(periods)
        assert periods == list(range(1, n + 1))
        S = np.vstack([carry] + [by_period[(e, p)] for p in periods])  # S[0] = carry
        nodes = np.array([S[t] - S[t & (t - 1)] for t in range(1, n + 1)])
        H = np.zeros((n, T))
        H[:, start : start + n] = _node_matrix(n)
        rows_H.append(H)
        obs.append(nodes)
        weights.append(1.0 / node_var[:n])
        carry = S[n]
        start += n
    H = np.vstack(rows_H)  # (nodes, T)
    Y = np.vstack(obs)  # (nodes, width)
    w = np.concatenate(weights)
    # unknowns x = vec(A), A (T, width) row-major; observation rows kron(H, I)
    Hf = np.kron(H, np.eye(width))
    yf = Y.reshape(-1)
    wf = np.repeat(w, width)
    # every period's vector satisfies the constraints: C = kron(I_T, rows), C x = 0;
    # null(C) = kron(I_T, null(rows)), a dense basis of the feasible set
    Z = np.kron(np.eye(T), scipy.linalg.null_space(constraint_rows))
    sw = np.sqrt(wf)
    u, *_ = np.linalg.lstsq(sw[:, None] * (Hf @ Z), sw * yf, rcond=None)
    A = (Z @ u).reshape(T, width)
    return A, np.cumsum(A, axis=0)


def _revision_arrays(records, names) -> tuple[np.ndarray, np.ndarray, int]:
    """The latest consistent value of every period (revisions publish only new periods)."""
    latest = {}
    for r in records:
        if r.key not in latest or r.revision >= latest[r.key].revision:
            latest[r.key] = r
    rows = sorted(latest.values(), key=lambda r: (r.epoch, r.period))
    counts = np.array([[r.counts[n] for n in names] for r in rows])
    totals = np.array([[r.totals[n] for n in names] for r in rows])
    return counts, totals, max(r.periods_covered for r in rows)


def test_restaurant_revision_is_the_dense_wls_solution_and_respects_combos() -> None:
    spec = example_spec("restaurant")
    stream = spec.streams["restaurant-items"]
    engine = Engine(spec, sampler=InsecureSeededSampler(11))
    outputs, letters = drive(
        engine,
        (line.text for line in generate("restaurant", 365, 50, seed=5)),
        as_of=release_instant(spec, 365),
    )
    assert not letters
    outputs += engine.revise("restaurant-items")
    names = stream.counters.names
    counts, totals, covered = _revision_arrays(consistent(outputs), names)
    assert covered == 365
    assert counts.shape == (365, 5)

    combos = np.array([v for _, v in stream.constraints.combos], dtype=float)
    null = scipy.linalg.null_space(combos).T  # (2, 5): rows N with N v = 0 on span(combos)
    assert null.shape == (2, 5)
    assert np.abs(counts @ null.T).max() <= 1e-9
    expected_counts, expected_totals = _dense_wls(releases(outputs), names, stream, null)
    assert np.abs(counts - expected_counts).max() <= 1e-9
    assert np.abs(totals - expected_totals).max() <= 1e-9
    # and it is not just the raw releases: projection changed them
    noisy = np.array(
        [
            next(r.noisy_count for r in releases(outputs) if r.period == 1 and r.counter == n)
            for n in names
        ]
    )
    assert np.abs(counts[0] - noisy).max() > 1e-6


CENSUS_SPEC = """
[sources.people]
topic = "people"
kind = "person"
epsilon_cap = "0.8"

[streams.census]
source = "people"
epsilon = "0.8"
sensitivity = 4
horizon = 16
period = { unit = "fixed", start = "2024-01-01T00:00:00Z", length = "1h" }
constraints = { kind = "hierarchy" }
consistency = { every_periods = 5, at_epoch_end = true }

[streams.census.counters]
kind = "attributes"
attributes = [
    { name = "sex", categories = ["f", "m"] },
    { name = "age", categories = ["young", "mid", "old"] },
]
"""


def _census_lines(periods: int, seed: int) -> list[str]:
    import json

    rng = np.random.default_rng(seed)
    lines = []
    for j in range(periods):
        for k in range(int(rng.poisson(30))):
            lines.append(  # noqa: PERF401
                json.dumps(
                    {
                        "event_id": f"{j}-{k}",
                        "event_time": 1704067200 + 3600 * j + float(rng.uniform(0, 3599)),
                        "attributes": {
                            "sex": ["f", "m"][int(rng.integers(2))],
                            "age": ["young", "mid", "old"][int(rng.integers(3))],
                        },
                    }
                )
            )
    return lines


def test_census_revision_across_epochs_is_the_dense_wls_solution() -> None:
    spec = parse_spec(CENSUS_SPEC)
    stream = spec.streams["census"]
    names = stream.counters.names
    assert names[:6] == ("total", "sex=f", "sex=m", "age=young", "age=mid", "age=old")
    engine = Engine(spec, sampler=InsecureSeededSampler(3))
    # 3 epochs of 16, 16, 8
    outputs, letters = drive(engine, _census_lines(40, seed=8), as_of=1704067200 + 3600 * 40)
    assert not letters
    outputs += engine.revise("census")
    counts, totals, covered = _revision_arrays(consistent(outputs), names)
    assert covered == 40

    # constraint rows over (total, sex f/m, age y/m/o, cells f-y f-m f-o m-y m-m m-o)
    col = {n: k for k, n in enumerate(names)}
    rows = []
    cells = [n for n in names if "," in n]
    row = np.zeros(len(names))
    row[col["total"]] = 1
    for c in cells:
        row[col[c]] -= 1
    rows.append(row)
    for attr, values in (("sex", ["f", "m"]), ("age", ["young", "mid", "old"])):
        for v in values:
            row = np.zeros(len(names))
            row[col[f"{attr}={v}"]] = 1
            for c in cells:
                if f"{attr}={v}" in c.split(","):
                    row[col[c]] -= 1
            rows.append(row)
    R = np.array(rows)
    assert np.abs(counts @ R.T).max() <= 1e-9
    assert np.abs(totals @ R.T).max() <= 1e-9
    expected_counts, expected_totals = _dense_wls(releases(outputs), names, stream, R)
    assert np.abs(counts - expected_counts).max() <= 1e-9
    assert np.abs(totals - expected_totals).max() <= 1e-9
    # every revision published exactly the periods released since the one before it (past
    # periods' consistent values never change, so they are not repeated)
    revs = consistent(outputs)
    before = 0
    for number in sorted({r.revision for r in revs}):
        rs = [r for r in revs if r.revision == number]
        covered = rs[0].periods_covered
        published = sorted(r.epoch * stream.horizon + r.period for r in rs)
        assert published == list(range(before + 1, covered + 1))
        before = covered


def _consistent_draws(trials: int) -> tuple[dict, dict]:
    """Consistent values of a short restaurant stream over ``trials`` independent noise draws
    (same data, seeded samplers), and the standard deviations the records declare."""
    text = (
        __import__("importlib.resources", fromlist=["files"])
        .files("streamdp")
        .joinpath("examples", "restaurant.toml")
        .read_text("utf-8")
        .replace("horizon = 366", "horizon = 4")
        .replace("every_periods = 7", "every_periods = 3")
    )
    spec = parse_spec(text)
    lines = [line.text for line in generate("restaurant", 6, 3, seed=1, spec=spec)]
    values: dict = {}
    declared: dict = {}
    for trial in range(trials):
        engine = Engine(spec, sampler=InsecureSeededSampler(1000 + trial), batch=True)
        outputs, _ = drive(engine, lines, as_of=release_instant(spec, 6))
        outputs += engine.revise("restaurant-items")
        for r in consistent(outputs):
            for kind, stds in (("count", r.count_std), ("total", r.total_std)):
                for counter, sd in stds.items():
                    cell = (kind, r.epoch, r.period, counter)
                    value = (r.counts if kind == "count" else r.totals)[counter]
                    values.setdefault(cell, []).append(value)
                    declared[cell] = sd
    return values, declared


def _variances_match(values: dict, declared: dict, inflate: float = 1.0) -> bool:
    ratios = []
    for cell, xs in values.items():
        sd = declared[cell] * inflate
        ratios.append(float(np.var(xs, ddof=1)) / sd**2)
    ratios_a = np.array(ratios)
    # the variance of a sample variance of n draws is about sigma^4 (2 + kurtosis) / n; the
    # discrete Laplace sums here have excess kurtosis below 3: per-cell tolerance ~4.5 sd,
    # pooled tolerance on the mean ratio much tighter
    n = len(next(iter(values.values())))
    per_cell = 4.5 * np.sqrt(5.0 / n)
    return bool(np.all(np.abs(ratios_a - 1) < per_cell) and abs(ratios_a.mean() - 1) < 0.05)


def test_consistent_values_declare_their_exact_standard_deviation() -> None:
    """Issue 14: every consistent value carries its exact sd (P_jj times the release's
    variance, carry included across epochs); 3,000 noise draws agree, and the same check
    rejects declared deviations 30% off (power)."""
    values, declared = _consistent_draws(3000)
    assert {cell[1] for cell in values} == {0, 1}  # two epochs: the carry's variance counts
    assert _variances_match(values, declared)
    assert not _variances_match(values, declared, inflate=1.3)
    assert not _variances_match(values, declared, inflate=0.7)


def test_a_revision_projects_only_the_epochs_it_publishes(monkeypatch) -> None:
    """Issue 15: a horizon-2 stream revises at every epoch end; each revision used to project
    every epoch so far (O(history) per close). Now it projects the nodes of the epochs it
    publishes and carries the earlier epochs' consistent totals from a cache, giving exactly
    (==) the values of one projection over the whole history."""
    import streamdp.engine.revision as revision_module
    from streamdp.engine.revision import consistent_epochs, project_nodes

    spec = parse_spec(CENSUS_SPEC.replace("horizon = 16", "horizon = 2").replace(
        "every_periods = 5", "every_periods = 0"
    ))  # fmt: skip
    engine = Engine(spec, sampler=InsecureSeededSampler(4))
    projected: list[int] = []

    def counting(stream_spec, values, group_variances=None):
        projected.append(len(values))
        return project_nodes(stream_spec, values, group_variances)

    monkeypatch.setattr(revision_module, "project_nodes", counting)
    outputs, _ = drive(engine, _census_lines(40, seed=2), as_of=1704067200 + 3600 * 40)
    records = consistent(outputs)
    assert {r.epoch for r in records} == set(range(20))
    # each node projected on its own, each epoch's two nodes at most twice: when published,
    # and to carry its final total (a projection over the whole history each time would
    # project 2 + 4 + ... + 40 = 420 nodes)
    assert set(projected) == {1}
    assert sum(projected) <= 2 * 2 * 20
    monkeypatch.undo()
    names = spec.streams["census"].counters.names
    whole = consistent_epochs(spec.streams["census"], engine.streams["census"].node_values())
    for r in records:
        counts, totals = whole[r.epoch]
        assert [r.counts[n] for n in names] == counts[r.period - 1].tolist()
        assert [r.totals[n] for n in names] == totals[r.period - 1].tolist()
