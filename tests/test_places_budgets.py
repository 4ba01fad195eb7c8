"""Per-level budgets of a places stream (issue 29; seed 002): ``counters.level_weights``.

What these tests prove:
- the spec refuses weights of the wrong length, non-positive weights, and mechanisms that do
  not run grouped; the fingerprint changes with the weights;
- the levels' budgets add up to the stream's exactly (Fractions over the node scales each
  level's counter actually uses: in every period, the losses of one event over every level
  and node covering it add up to at most epsilon); equal weights give the ungrouped scales;
- the weighted tree projection equals the dense GLS solve (Moore-Penrose) with per-row
  variances, and its closed-form variances equal the dense covariance's diagonal;
- a weighted stream replays with parent = sum of children to 1e-6, its releases say their
  level's share (and validate against the schema), heavier county weights make counties more
  accurate, the daemon's hot state + stored nodes rebuild its snapshot, and a restore
  continues identically;
- the declared stds of the consistent counts and totals hold over 3,000 noise draws (with a
  power check: stds 25% off are rejected);
- the planner's optimal shares match a grid search over the simplex (a convex objective).
"""

from __future__ import annotations

import functools
import json
import shutil
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from streamdp.consistency.tree import Tree
from streamdp.continual.fenwick import update_chain
from streamdp.continual.grouped_bank import GroupedBank
from streamdp.continual.node_budgets import node_scales
from streamdp.daemon.checkpoint import join_snapshot
from streamdp.daemon.exits import fatal_exit
from streamdp.engine import Engine, EngineSpec, load_spec, parse_spec
from streamdp.engine.budget_groups import (
    budget_groups,
    group_epsilon,
    group_sensitivity,
    open_grouped_bank,
)
from streamdp.engine.counter_fields import CounterFields
from streamdp.engine.replay import read_jsonl
from streamdp.engine.stream import stream_strategy
from streamdp.errors import ConfigError, StateError
from streamdp.kinds.places import project_by_level, projected_variances_by_level
from streamdp.noise import InsecureSeededSampler
from streamdp.planner.level_weights import objective_value, optimal_level_weights
from streamdp.synth import generate, release_instant
from tests.consistent_draws import consistent_noise_draws, replay_lines, stds_hold
from tests.places_fixture import small_county_spec, tree_gap

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = (1, 2, 5)

SPEC = """
[sources.admissions]
topic = "admissions"
kind = "person"
epsilon_cap = 1

[streams.by-county]
source = "admissions"
epsilon = 1
sensitivity = 3
horizon = 30
period = {{ unit = "day", start = "2024-01-01" }}
mechanism = "{mechanism}"
counters = {{ kind = "places", places = "{places}", field = "county"{weights} }}
constraints = {{ kind = "tree" }}
"""


def _text(tmp_path: Path, weights: str, mechanism: str = "fda") -> str:
    places = tmp_path / "places.csv"
    places.write_text("node,parent\nUS,\nA,US\nB,US\na1,A\na2,A\nb1,B\n", encoding="utf-8")
    return SPEC.format(places=places, weights=weights, mechanism=mechanism)


@pytest.mark.parametrize(
    ("weights", "mechanism", "message"),
    [
        (", level_weights = [1, 2]", "fda", "one weight per level"),
        (", level_weights = [1, 0, 2]", "fda", "level_weights"),
        (", level_weights = [1, -1, 2]", "fda", "level_weights"),
        (', level_weights = "county"', "fda", "one weight per level"),
        (", level_weights = [1, 1, 2]", "kary_gls", "fda, binary, naive"),
    ],
)
def test_the_spec_refuses_bad_level_weights(
    weights: str, mechanism: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(_text(tmp_path, weights, mechanism))


def test_weights_are_read_and_change_the_fingerprint(tmp_path: Path) -> None:
    plain = parse_spec(_text(tmp_path, ""))
    weighted = parse_spec(_text(tmp_path, ", level_weights = [1, 1.5, 2.5]"))
    stream = weighted.streams["by-county"]
    assert stream.counters.level_weights == (Decimal(1), Decimal("1.5"), Decimal("2.5"))
    assert [(g.name, g.start, g.stop, g.share) for g in budget_groups(stream)] == [
        ("level 0", 0, 1, Fraction(1, 5)),
        ("level 1", 1, 3, Fraction(3, 10)),
        ("level 2", 3, 6, Fraction(1, 2)),
    ]
    assert budget_groups(plain.streams["by-county"]) == ()
    assert plain.fingerprint() != weighted.fingerprint()


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 2, 5), (3, 1, 7), (1, 1, 1000)])
def test_every_period_spends_at_most_epsilon_over_the_levels_and_nodes(
    weights: tuple[int, ...],
) -> None:
    """Exact accounting: level ``g``'s node ``i`` loses ``Delta_g / b_{g,i}`` per event (its
    true contribution bound over the scale its counter uses); summed over the levels and the
    nodes covering any one period it is at most epsilon, as Fractions."""
    spec = small_county_spec(level_weights=weights)
    stream = next(iter(spec.streams.values()))
    strategy = stream_strategy(stream)
    horizon = stream.horizon
    groups = budget_groups(stream)
    exact_delta = Fraction(stream.noise_sensitivity, len(groups))  # one per level: 3 / 3
    scales = [
        node_scales(strategy, group_epsilon(stream, g), group_sensitivity(stream, g))
        for g in groups
    ]
    for period in range(1, horizon + 1):
        nodes = update_chain(period, horizon)
        loss = sum(exact_delta / Fraction(float(scale[i - 1])) for scale in scales for i in nodes)
        assert loss <= Fraction(stream.epsilon), f"period {period}: {float(loss)}"
    # tight: nothing is wasted beyond the rounding of the scales
    assert float(loss) == pytest.approx(float(stream.epsilon), rel=1e-9)


def test_equal_weights_give_the_ungrouped_noise_scales() -> None:
    spec = small_county_spec(level_weights=(1, 1, 1))
    stream = next(iter(spec.streams.values()))
    strategy = stream_strategy(stream)
    plain = node_scales(strategy, stream.epsilon, float(stream.noise_sensitivity))
    for group in budget_groups(stream):
        grouped = node_scales(
            strategy, group_epsilon(stream, group), group_sensitivity(stream, group)
        )
        np.testing.assert_allclose(grouped, plain, rtol=1e-12)


def _dense_gls(
    tree: Tree, values: np.ndarray, variances: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """GLS onto "node = sum of children" by the dense formula
    ``y = x - V C^T (C V C^T)^+ C x`` (Moore-Penrose), and the diagonal of its covariance
    ``V - V C^T (C V C^T)^+ C V``."""
    c = tree.constraint_matrix().toarray()
    v = np.diag(variances)
    gain = v @ c.T @ np.linalg.pinv(c @ v @ c.T)
    y = values - gain @ (c @ values)
    return y, np.diag(v - gain @ c @ v)


def test_the_weighted_projection_is_the_dense_gls_row_by_row() -> None:
    spec = small_county_spec(level_weights=WEIGHTS)
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    rng = np.random.default_rng(4)
    rows = 5
    values = rng.normal(0, 30, size=(rows, stream.counters.width))
    level_variances = rng.uniform(0.5, 400, size=(rows, places.levels))
    projected = project_by_level(stream, values, level_variances)
    variances = projected_variances_by_level(stream, level_variances)
    cells = stream.counters.width // places.size
    for r in range(rows):
        per_place = level_variances[r, places.depth]
        for cell in range(cells):
            x = values[r, cell::cells]
            expected, expected_var = _dense_gls(places.tree, x, per_place)
            np.testing.assert_allclose(projected[r, cell::cells], expected, atol=1e-9)
            np.testing.assert_allclose(variances[r, cell::cells], expected_var, rtol=1e-9)
    # the rows really are weighted differently: the unweighted projection differs
    plain = project_by_level(stream, values, np.ones_like(level_variances))
    assert np.max(np.abs(plain - projected)) > 1.0


def _replayed(spec: EngineSpec, periods: int, tmp: Path, seed: int) -> Path:
    lines = [line.text for line in generate("county-admissions", periods, 12.0, seed=3, spec=spec)]
    return replay_lines(spec, lines, periods, tmp, seed)


def test_a_weighted_stream_replays_consistent_and_says_each_levels_share(tmp_path: Path) -> None:
    spec = small_county_spec(level_weights=WEIGHTS)
    stream = next(iter(spec.streams.values()))
    out = _replayed(spec, 5, tmp_path / "w", seed=7)
    releases = read_jsonl(out / "releases.jsonl")
    consistent = read_jsonl(out / "consistent.jsonl")
    schema = json.loads((ROOT / "schemas" / "release.schema.json").read_text())
    shares = {"US": 1 / 8, "S01": 2 / 8, "S01-C001": 5 / 8}
    for record in releases:
        jsonschema.validate(record, schema)
        group = record["budget_group"]
        place = record["counter"].split("/")[0]
        if place in shares:
            assert group["share"] == pytest.approx(shares[place])
            assert group["epsilon"] == pytest.approx(shares[place] * float(stream.epsilon))
    assert consistent
    for record in consistent:
        assert tree_gap(spec, record["counts"]) < 1e-6
        assert tree_gap(spec, record["totals"]) < 1e-6
    # the county level has 5/8 of the budget instead of 1/3: its releases and consistent
    # counts are more accurate than the ungrouped stream's, the nation's less
    plain = _replayed(small_county_spec(), 5, tmp_path / "p", seed=7)
    plain_releases = {r["key"]: r for r in read_jsonl(plain / "releases.jsonl")}
    plain_consistent = read_jsonl(plain / "consistent.jsonl")
    for record in releases[: stream.counters.width]:
        before = plain_releases[record["key"]]["count_std"]
        if record["counter"].count("-C"):
            assert record["count_std"] < before
        elif record["counter"].startswith("US"):
            assert record["count_std"] > before
    county, nation = "S01-C001/sex=female", "US/sex=female"
    assert consistent[0]["count_std"][county] < plain_consistent[0]["count_std"][county]
    assert consistent[0]["count_std"][nation] > plain_consistent[0]["count_std"][nation]


def test_the_hot_state_and_stored_nodes_rebuild_a_weighted_engine() -> None:
    spec = small_county_spec(level_weights=WEIGHTS)
    engine = Engine(spec, sampler=InsecureSeededSampler(3))
    lines = [line.text for line in generate("county-admissions", 6, 12.0, seed=3, spec=spec)]
    for line in lines[: len(lines) // 2]:
        engine.ingest(line)
    engine.advance_clock(release_instant(spec, 3))
    nodes = engine.take_changes().new_nodes
    hot = json.loads(json.dumps(engine.take_changes().hot_state))
    assert "noisy_nodes" not in json.dumps(hot)
    rebuilt = join_snapshot(hot, lambda s, e, t: nodes.get((s, e, t)))
    assert rebuilt == json.loads(json.dumps(engine.snapshot(with_seen=False)))
    restored = Engine(spec, sampler=InsecureSeededSampler(3))
    restored.restore(json.loads(json.dumps(engine.snapshot())))
    for line in lines[len(lines) // 2 :]:
        engine.ingest(line)
        restored.ingest(line)
    later = release_instant(spec, 6)
    assert [r.to_json() for r in engine.advance_clock(later)] == [
        r.to_json() for r in restored.advance_clock(later)
    ]


def test_a_grouped_bank_draws_every_levels_noise_before_any_level_closes() -> None:
    """A sampler failing on the last level's draw leaves every level unchanged."""
    spec = small_county_spec(level_weights=WEIGHTS)
    stream = next(iter(spec.streams.values()))

    class FailingOnCounties(InsecureSeededSampler):
        def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> Any:
            if "level 2" in label:
                raise RuntimeError("sampler down")
            return super().discrete_laplace(scale, size, label=label)

    strategy = stream_strategy(stream)
    assert not isinstance(strategy, tuple)
    bank = open_grouped_bank(stream, strategy, FailingOnCounties(1), noise_label="x")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="sampler down"):
        bank.close_period(np.zeros(stream.counters.width, dtype=np.int64))
    assert bank.periods_closed == 0
    assert all(c.periods_closed == 0 for _, _, c in bank.groups)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda group: group.pop("start"),
        lambda group: group.update(stop="6"),
        lambda group: group.update(counter=7),
    ],
)
def test_a_malformed_grouped_state_is_refused_without_quoting_its_sums(corrupt: Any) -> None:
    """A budget group's state holds raw partial sums (pending Fenwick nodes), and the worker
    logs a StateError's text: the refusal names the group by position, never its contents."""
    spec = small_county_spec(level_weights=WEIGHTS)
    stream = next(iter(spec.streams.values()))
    strategy = stream_strategy(stream)
    assert not isinstance(strategy, tuple)
    bank = open_grouped_bank(stream, strategy, InsecureSeededSampler(1), noise_label="x")
    raw = np.zeros(stream.counters.width, dtype=np.int64)
    raw[:4] = [424242, 414141, 171717, 161616]
    bank.close_period(raw)
    state = json.loads(json.dumps(bank.state()))
    assert "424242" in json.dumps(state["groups"][0]["counter"])  # the sums are in the state
    corrupt(state["groups"][0])
    with pytest.raises(StateError, match="budget group 0") as refused:
        GroupedBank.from_state(state, InsecureSeededSampler(1))
    assert not any(str(v) in str(refused.value) for v in raw[:4])
    _status, line = fatal_exit(refused.value)
    assert not any(str(v) in line for v in raw[:4])


@functools.cache
def _draws(draws: int) -> tuple[Any, ...]:
    """Consistent noise draws of the weighted small county spec (no events)."""
    return consistent_noise_draws(small_county_spec(level_weights=WEIGHTS), draws, 50_000)


@pytest.mark.parametrize(("scale", "holds"), [(1.0, True), (1.25, False), (1 / 1.25, False)])
def test_the_weighted_streams_declared_stds_hold_in_simulation(scale: float, holds: bool) -> None:
    """Period 3's count and running total (the count's variance comes from nodes on one of
    two read paths, the total's from one path), every counter: the sum of squared
    standardised values is within a normal bound at p = 1e-6 (Bonferroni over counters, the
    spread from the sample's fourth moment); stds 25% off must be rejected everywhere."""
    verdicts = stds_hold(_draws(3000), scale)
    if holds:
        assert all(verdicts)
    else:
        assert not any(verdicts)


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
@pytest.mark.parametrize("target", [0, 1, 2, None])
def test_the_planners_level_shares_are_the_grid_optimum(definition: Any, target: Any) -> None:
    """On a small 3-level tree the SLSQP shares are at least as good as the best point of a
    grid of step 0.01 over the simplex, and close to it."""
    spec = small_county_spec()
    places = next(iter(spec.streams.values())).counters.places
    assert places is not None
    tree = places.tree
    best = optimal_level_weights(tree, definition, target)
    assert best.sum() == pytest.approx(1.0)
    found = objective_value(tree, best, definition, target)
    grid = [(a / 100, b / 100, 1 - (a + b) / 100) for a in range(1, 99) for b in range(1, 100 - a)]
    values = [objective_value(tree, w, definition, target) for w in grid]
    assert found <= min(values) * (1 + 1e-6)
    near = np.asarray(grid[int(np.argmin(values))])
    assert np.max(np.abs(near - best)) < 0.02
    # and better than equal shares, unless equal shares are (nearly) the optimum
    assert found <= objective_value(tree, (1, 1, 1), definition, target) + 1e-12


def test_plan_prints_each_levels_error_and_the_best_shares(capsys: Any) -> None:
    """``plan --config`` on the county example: per level, the share now (equal), the
    relative std of its consistent counts, and the shares best for the counties (nearly all
    of the budget, a third of the std) and for every level alike; the table says the same."""
    from streamdp.cli import main

    example = str(ROOT / "streamdp" / "examples" / "county_admissions.toml")
    assert main(["plan", "--config", example, "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    rows = entry["level_weights"]["levels"]
    assert [(r["level"], r["places"]) for r in rows] == [(0, 1), (1, 50), (2, 3143)]
    assert all(r["share_now"] == pytest.approx(1 / 3) for r in rows)
    assert rows[2]["share_best_deepest"] > 0.99
    assert rows[2]["std_best_deepest"] == pytest.approx(1 / 3, rel=1e-2)
    assert sum(r["share_best_levels"] for r in rows) == pytest.approx(1.0)
    mean_best = np.mean([r["std_best_levels"] ** 2 for r in rows])
    assert mean_best <= np.mean([r["std_now"] ** 2 for r in rows]) + 1e-12
    assert main(["plan", "--config", example]) == 0
    text = capsys.readouterr().out
    assert "paste a column of shares as counters.level_weights" in text
    assert "3143" in text


def test_every_printed_column_of_shares_loads_as_the_specs_level_weights(
    capsys: Any, tmp_path: Path
) -> None:
    """The table tells the reader to paste a column of shares into the spec: each column,
    as printed (the best-for-counties one holds the planner's 1e-4 floor), must load (the spec
    refuses a share of 0, which three decimals printed it as)."""
    from streamdp.cli import main

    example = ROOT / "streamdp" / "examples" / "county_admissions.toml"
    assert main(["plan", "--config", str(example)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["level", "places"])
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    shutil.copy(example.parent / "counties.csv", tmp_path / "counties.csv")
    for column in (2, 4, 6):  # share now, best deepest, best levels
        pasted = ", ".join(row[column] for row in rows)
        text = example.read_text(encoding="utf-8").replace(
            'field = "county"\n', f'field = "county"\nlevel_weights = [{pasted}]\n'
        )
        assert "level_weights" in text
        (tmp_path / "spec.toml").write_text(text, encoding="utf-8")
        stream = next(iter(load_spec(tmp_path / "spec.toml").streams.values()))
        assert stream.counters.level_weights is not None
        assert [str(w) for w in stream.counters.level_weights] == pasted.split(", ")


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_each_groups_published_budget_never_understates_what_it_spends(
    tmp_path: Path, definition: str
) -> None:
    """A release's ``budget_group`` amount is what the group spends: under pure DP the
    epsilon its noise is calibrated on (the exact share rounded down), under zCDP its exact
    share of rho rounded up. Weights 1, 1, 3 of epsilon (rho) 1: rounding ``1 x share`` to
    nearest showed two levels one ulp above their exact share and the third one below it."""
    text = _text(tmp_path, ", level_weights = [1, 1, 3]", "binary")
    if definition == "zcdp":
        text = text.replace("epsilon_cap = 1", "rho_cap = 1").replace(
            "epsilon = 1", 'privacy = { definition = "zcdp", rho = 1 }'
        )
    stream = parse_spec(text).streams["by-county"]
    fields = CounterFields(stream)
    key = "epsilon" if definition == "pure" else "rho"
    for group in budget_groups(stream):
        exact = Fraction(1) * group.share
        for counter in range(group.start, group.stop):
            published = fields.of(counter)["budget_group"][key]  # type: ignore[index]
            if definition == "pure":
                assert published == group_epsilon(stream, group)
                assert Fraction(published) <= exact
            else:
                assert Fraction(published) >= exact
                assert Fraction(published) - exact < Fraction(1, 2**50)


def test_the_plan_of_each_budget_group_is_what_its_releases_declare(tmp_path: Path) -> None:
    """An audit found ``plan`` printing one row for a stream with level_weights, the whole
    budget's, while each level's releases use its own share (x2 and x0.5 in its example). The
    plan now has a row per group: its first release's std must be what the engine declares for
    that level's period-1 releases, and the whole row what the stream without weights does."""
    from streamdp.planner.spec_plan import group_plans, plan_stream_at

    spec = small_county_spec(level_weights=WEIGHTS)
    stream = next(iter(spec.streams.values()))
    plans = dict(group_plans(stream, "discrete-laplace"))
    assert set(plans) == {"level 0", "level 1", "level 2"}
    assert group_plans(next(iter(small_county_spec().streams.values())), "discrete-laplace") == []
    weighted = read_jsonl(_replayed(spec, 2, tmp_path / "w", seed=7) / "releases.jsonl")
    first = [r for r in weighted if r["period"] == 1]
    assert len(first) == stream.counters.width
    for record in first:
        planned = plans[f"level {record['place']['level']}"]
        (release,) = [r for r in planned.releases if r.t == 1]
        assert record["total_std"] == pytest.approx(release.total_std, rel=1e-12)
    plain = read_jsonl(_replayed(small_county_spec(), 2, tmp_path / "p", seed=7) / "releases.jsonl")
    whole = plan_stream_at(stream, stream.unit_multiplier, "discrete-laplace")
    (release,) = [r for r in whole.releases if r.t == 1]
    for record in plain:
        if record["period"] == 1:
            assert record["total_std"] == pytest.approx(release.total_std, rel=1e-12)
