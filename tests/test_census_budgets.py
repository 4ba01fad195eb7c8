"""Per-attribute budgets of a census stream (issue 29; seed 002): ``counters.attribute_weights``.

What these tests prove:
- the spec refuses weights that miss a group, name an unknown one, are not positive, clash
  with an attribute called ``total`` or ``cells``, sit on a places stream, or run with a
  mechanism that does not run grouped; the fingerprint changes with the weights;
- the groups' budgets add up to the stream's exactly (Fractions over the node scales each
  group's counter uses: in every period, one event's losses over every group and node
  covering it add up to at most epsilon); equal weights give the ungrouped scales;
- the weighted census projection equals the dense GLS solve (Moore-Penrose) with per-row
  variances, and its closed-form variances equal the dense covariance's diagonal;
- a weighted stream replays with total = each marginal's sum = the cells' sum to 1e-6, its
  releases say their group's share (and validate against the schema), heavier cell weights
  make cells more accurate, and a restore continues identically;
- the declared stds of the consistent counts and totals hold over 3,000 noise draws (with a
  power check: stds 25% off are rejected);
- the planner's shares match a grid search over the simplex, its relative errors are the
  engine's declared variances, and ``plan --config`` prints them for the census example.
"""

from __future__ import annotations

import functools
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from streamdp.continual.fenwick import update_chain
from streamdp.continual.node_budgets import node_scales
from streamdp.engine import Engine, EngineSpec, parse_spec
from streamdp.engine.budget_groups import budget_groups, group_epsilon, group_sensitivity
from streamdp.engine.replay import read_jsonl
from streamdp.engine.stream import stream_strategy
from streamdp.errors import ConfigError
from streamdp.kinds import stream_kind
from streamdp.kinds.base import GroupedKind
from streamdp.noise import InsecureSeededSampler
from streamdp.planner.attribute_weights import (
    consistent_group_errors,
    objective_value,
    optimal_attribute_weights,
)
from streamdp.synth import generate, release_instant
from tests.census_fixture import small_census_spec, small_census_text, weighted_census_spec
from tests.consistent_draws import consistent_noise_draws, replay_lines, stds_hold

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = (1, 1, 2, 6)  # total, sex, age, cells


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("attribute_weights = { total = 1, sex = 1, cells = 2 }", "missing age"),
        ("attribute_weights = { total = 1, sex = 1, age = 1, cells = 2, x = 1 }", "unknown x"),
        ("attribute_weights = { total = 1, sex = 0, age = 1, cells = 2 }", "attribute_weights.sex"),
        ("attribute_weights = { total = 1, sex = -1, age = 1, cells = 2 }", "attribute_weights"),
        ("attribute_weights = [1, 1, 1, 2]", "must be a table"),
    ],
)
def test_the_spec_refuses_bad_attribute_weights(weights: str, message: str) -> None:
    text = small_census_text() + weights + "\n"
    with pytest.raises(ConfigError, match=message):
        parse_spec(text)


def test_the_spec_refuses_weights_it_cannot_run() -> None:
    with pytest.raises(ConfigError, match="fda, binary, naive"):
        small_census_spec(WEIGHTS, mechanism="kary_gls")
    clash = small_census_text(WEIGHTS).replace('name = "age"', 'name = "cells"')
    clash = clash.replace("age = 2, ", "", 1)
    with pytest.raises(ConfigError, match="name of a group"):
        parse_spec(clash)


def test_a_places_stream_is_told_to_weigh_its_levels(tmp_path: Path) -> None:
    places = tmp_path / "places.csv"
    places.write_text("node,parent\nUS,\nA,US\nB,US\n", encoding="utf-8")
    text = f"""
[sources.admissions]
topic = "admissions"
kind = "person"
epsilon_cap = 1
[streams.by-state]
source = "admissions"
epsilon = 1
sensitivity = 2
horizon = 8
period = {{ unit = "day", start = "2024-01-01" }}
[streams.by-state.counters]
kind = "places"
places = "{places}"
field = "state"
attribute_weights = {{ total = 1 }}
"""
    with pytest.raises(ConfigError, match="weigh its levels with level_weights"):
        parse_spec(text)


def test_weights_are_read_in_counter_order_and_change_the_fingerprint() -> None:
    weighted = small_census_spec((1, 2, 3, 4))
    stream = weighted.streams["people"]
    assert stream.counters.attribute_weights == tuple(Decimal(w) for w in (1, 2, 3, 4))
    assert [(g.name, g.start, g.stop, g.share) for g in budget_groups(stream)] == [
        ("total", 0, 1, Fraction(1, 10)),
        ("sex", 1, 3, Fraction(2, 10)),
        ("age", 3, 6, Fraction(3, 10)),
        ("cells", 6, 12, Fraction(4, 10)),
    ]
    plain = small_census_spec()
    assert budget_groups(plain.streams["people"]) == ()
    assert plain.fingerprint() != weighted.fingerprint()


@pytest.mark.parametrize("weights", [(1, 1, 1, 1), (1, 1, 2, 6), (5, 1, 1, 1), (1, 1, 1, 1000)])
def test_every_period_spends_at_most_epsilon_over_the_groups_and_nodes(
    weights: tuple[int, ...],
) -> None:
    """Group ``g``'s node ``i`` loses ``Delta/G / b_{g,i}`` per event (one increment per group);
    summed over the groups and the nodes covering any one period it is at most epsilon, as
    Fractions, and tight up to the rounding of the scales."""
    stream = small_census_spec(weights).streams["people"]
    strategy = stream_strategy(stream)
    groups = budget_groups(stream)
    exact_delta = Fraction(stream.noise_sensitivity, len(groups))
    scales = [
        node_scales(strategy, group_epsilon(stream, g), group_sensitivity(stream, g))
        for g in groups
    ]
    worst = Fraction(0)
    for period in range(1, stream.horizon + 1):
        nodes = update_chain(period, stream.horizon)
        loss = sum(exact_delta / Fraction(float(scale[i - 1])) for scale in scales for i in nodes)
        assert loss <= Fraction(stream.epsilon), f"period {period}: {float(loss)}"
        worst = max(worst, loss)
    assert float(worst) == pytest.approx(float(stream.epsilon), rel=1e-9)


def test_equal_weights_give_the_ungrouped_noise_scales() -> None:
    stream = small_census_spec((1, 1, 1, 1)).streams["people"]
    strategy = stream_strategy(stream)
    plain = node_scales(strategy, stream.epsilon, float(stream.noise_sensitivity))
    for group in budget_groups(stream):
        grouped = node_scales(
            strategy, group_epsilon(stream, group), group_sensitivity(stream, group)
        )
        np.testing.assert_allclose(grouped, plain, rtol=1e-12)


def _census_matrix(sizes: tuple[int, ...]) -> np.ndarray:
    """Counter vector = A @ cells: the total, each attribute's marginal, the cells."""
    cells = int(np.prod(sizes))
    index = np.indices(sizes).reshape(len(sizes), -1)
    rows = [np.ones(cells)]
    for axis, size in enumerate(sizes):
        rows += [(index[axis] == c).astype(float) for c in range(size)]
    return np.vstack([*rows, np.eye(cells)])


@pytest.mark.parametrize("sizes", [(2, 3), (2, 7, 23)])
def test_the_weighted_projection_is_the_dense_gls_row_by_row(sizes: tuple[int, ...]) -> None:
    """Projection ``A (A' W A)^+ A' W y`` and covariance diagonal ``A (A' W A)^+ A'``."""
    spec = weighted_census_spec() if len(sizes) == 3 else small_census_spec(WEIGHTS)
    stream = next(iter(spec.streams.values()))
    kind = stream_kind("attributes")
    assert isinstance(kind, GroupedKind)
    groups = budget_groups(stream)
    a = _census_matrix(sizes)
    assert a.shape[0] == stream.counters.width
    rng = np.random.default_rng(5)
    rows = 4
    values = rng.normal(0, 30, size=(rows, stream.counters.width))
    group_variances = rng.uniform(0.5, 400, size=(rows, len(groups)))
    projected = kind.project_by_group(stream, values, group_variances)
    variances = kind.projected_variances_by_group(stream, group_variances)
    for r in range(rows):
        per_counter = np.concatenate(
            [np.full(g.stop - g.start, group_variances[r, i]) for i, g in enumerate(groups)]
        )
        w = np.diag(1.0 / per_counter)
        inverse = np.linalg.pinv(a.T @ w @ a)
        np.testing.assert_allclose(projected[r], a @ inverse @ a.T @ w @ values[r], atol=1e-9)
        np.testing.assert_allclose(variances[r], np.diag(a @ inverse @ a.T), rtol=1e-9)
    plain = stream_kind("attributes").project(stream, values)
    assert np.max(np.abs(plain - projected)) > 1.0  # the weights really change the estimate


def _replayed(spec: EngineSpec, periods: int, tmp: Path, seed: int) -> Path:
    lines = [line.text for line in generate("census", periods, 20.0, seed=3, spec=spec)]
    return replay_lines(spec, lines, periods, tmp, seed)


def _hierarchy_gap(values: dict[str, float]) -> float:
    """Largest ``|total - marginal sum|``, ``|marginal - its cells' sum|`` of the small census."""
    sex, age = ("female", "male"), ("0-17", "18-64", "65+")
    gaps = [abs(values["total"] - sum(values[f"sex={s}"] for s in sex))]
    gaps.append(abs(values["total"] - sum(values[f"age={a}"] for a in age)))
    gaps += [abs(values[f"sex={s}"] - sum(values[f"sex={s},age={a}"] for a in age)) for s in sex]
    gaps += [abs(values[f"age={a}"] - sum(values[f"sex={s},age={a}"] for s in sex)) for a in age]
    return max(gaps)


def test_a_weighted_stream_replays_consistent_and_says_each_groups_share(
    tmp_path: Path,
) -> None:
    spec = small_census_spec(WEIGHTS)
    stream = spec.streams["people"]
    out = _replayed(spec, 6, tmp_path / "w", seed=7)
    releases = read_jsonl(out / "releases.jsonl")
    consistent = read_jsonl(out / "consistent.jsonl")
    schema = json.loads((ROOT / "schemas" / "release.schema.json").read_text())
    shares = {"total": 1 / 10, "sex": 1 / 10, "age": 2 / 10, "cells": 6 / 10}
    for record in releases:
        jsonschema.validate(record, schema)
        name = record["counter"]
        group = "cells" if "," in name else name.split("=")[0]
        assert record["budget_group"]["name"] == group
        assert record["budget_group"]["share"] == pytest.approx(shares[group])
        assert record["budget_group"]["epsilon"] == pytest.approx(shares[group])
    assert consistent
    for record in consistent:
        assert _hierarchy_gap(record["counts"]) < 1e-6
        assert _hierarchy_gap(record["totals"]) < 1e-6
    # the cells hold 6/10 of the budget instead of 1/4: more accurate than the ungrouped
    # stream's, the total less (before and after the projection)
    plain = _replayed(small_census_spec(), 6, tmp_path / "p", seed=7)
    plain_releases = {r["key"]: r for r in read_jsonl(plain / "releases.jsonl")}
    plain_consistent = read_jsonl(plain / "consistent.jsonl")
    for record in releases[: stream.counters.width]:
        before = plain_releases[record["key"]]["count_std"]
        assert (record["count_std"] < before) == ("," in record["counter"])
    cell = "sex=male,age=65+"
    assert consistent[0]["count_std"][cell] < plain_consistent[0]["count_std"][cell]
    assert consistent[0]["count_std"]["total"] > plain_consistent[0]["count_std"]["total"]


def test_a_restored_weighted_engine_continues_identically() -> None:
    spec = small_census_spec(WEIGHTS)
    engine = Engine(spec, sampler=InsecureSeededSampler(3))
    lines = [line.text for line in generate("census", 6, 20.0, seed=3, spec=spec)]
    for line in lines[: len(lines) // 2]:
        engine.ingest(line)
    engine.advance_clock(release_instant(spec, 3))
    restored = Engine(spec, sampler=InsecureSeededSampler(3))
    restored.restore(json.loads(json.dumps(engine.snapshot())))
    for line in lines[len(lines) // 2 :]:
        engine.ingest(line)
        restored.ingest(line)
    later = release_instant(spec, 6)
    assert [r.to_json() for r in engine.advance_clock(later)] == [
        r.to_json() for r in restored.advance_clock(later)
    ]


@functools.cache
def _draws(draws: int) -> tuple[Any, ...]:
    """Consistent noise draws of the weighted small census (no events)."""
    return consistent_noise_draws(small_census_spec(WEIGHTS), draws, first_seed=70_000)


@pytest.mark.parametrize(("scale", "holds"), [(1.0, True), (1.25, False), (1 / 1.25, False)])
def test_the_weighted_streams_declared_stds_hold_in_simulation(scale: float, holds: bool) -> None:
    """Period 3's count and running total, every counter: the sum of squared standardised
    values is within a normal bound at p = 1e-6 (Bonferroni over counters, the spread from
    the sample's fourth moment); stds 25% off must be rejected everywhere."""
    verdicts = stds_hold(_draws(3000), scale)
    if holds:
        assert all(verdicts)
    else:
        assert not any(verdicts)


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
@pytest.mark.parametrize("target", [0, 1, 3, None])
def test_the_planners_attribute_shares_are_the_grid_optimum(definition: Any, target: Any) -> None:
    """Sex 2 x age 3 (four groups): the SLSQP shares are at least as good as the best point
    of a grid of step 0.02 over the simplex, and better than equal shares (unless those are
    the optimum)."""
    sizes = (2, 3)
    best = optimal_attribute_weights(sizes, definition, target)
    assert best.sum() == pytest.approx(1.0)
    found = objective_value(sizes, best, definition, target)
    steps = 50
    grid = [
        np.array([a, b, c, steps - a - b - c]) / steps
        for a in range(1, steps)
        for b in range(1, steps - a)
        for c in range(1, steps - a - b)
    ]
    values = [objective_value(sizes, w, definition, target) for w in grid]
    assert found <= min(values) * (1 + 1e-6)
    assert found <= objective_value(sizes, (1, 1, 1, 1), definition, target) + 1e-12


def test_the_planners_errors_are_the_engines_declared_variances() -> None:
    """The planner's relative variances are what the engine declares: with weights ``w``, a
    consistent value's variance over the ungrouped release's variance of the same node (fda,
    continuous Laplace) is the planner's figure, up to the discrete noise (1/6 per node)."""
    from streamdp.kinds.attributes import KIND

    stream = small_census_spec(WEIGHTS).streams["people"]
    errors = consistent_group_errors((2, 3), WEIGHTS, "pure")
    groups = budget_groups(stream)
    strategy = stream_strategy(stream)
    plain = node_scales(strategy, stream.epsilon, float(stream.noise_sensitivity))
    grouped = np.array(
        [
            node_scales(strategy, group_epsilon(stream, g), group_sensitivity(stream, g))
            for g in groups
        ]
    )
    node = 0
    variances = KIND.projected_variances_by_group(stream, 2 * grouped[:, node][None, :] ** 2)[0]
    relative = variances / (2 * plain[node] ** 2)
    for g, group in enumerate(groups):
        np.testing.assert_allclose(relative[group.start : group.stop], errors[g], rtol=1e-9)


def test_plan_prints_each_groups_error_and_the_best_shares(capsys: Any) -> None:
    """``plan --config`` on the census example: per group (total, sex, race, age, cells), its
    share now (equal) and the relative std of its consistent values, and the shares best for
    the cells (nearly all of the budget: a fifth of the std) and for every group alike."""
    from streamdp.cli import main

    example = str(ROOT / "streamdp" / "examples" / "census.toml")
    assert main(["plan", "--config", example, "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    rows = entry["attribute_weights"]["groups"]
    assert [(r["group"], r["values"]) for r in rows] == [
        ("total", 1), ("sex", 2), ("race", 7), ("age", 23), ("cells", 322),
    ]  # fmt: skip
    assert all(r["share_now"] == pytest.approx(1 / 5) for r in rows)
    assert rows[-1]["share_best_cells"] > 0.99
    assert rows[-1]["std_best_cells"] == pytest.approx(1 / 5, rel=1e-2)
    mean_best = np.mean([r["std_best_groups"] ** 2 for r in rows])
    assert mean_best <= np.mean([r["std_now"] ** 2 for r in rows]) + 1e-12
    assert main(["plan", "--config", example]) == 0
    assert "write a column of shares as counters.attribute_weights" in capsys.readouterr().out
