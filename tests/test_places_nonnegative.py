"""Non-negative integer estimates of places streams (issue 29; TopDown's practice), as
post-processing of the consistent revisions.

- the maths: the continuous step equals scipy's constrained solve; the integer split equals an
  exhaustive search over every non-negative integer vector with the parent's sum; the whole
  top-down pass equals a reference written with that search node by node; the exact-rational
  path agrees and takes over where float arithmetic is not trusted to the unit; public tie
  keys (a hash of the period, cell and place) share tied units fairly over periods (with a
  power check: counter order is rejected), and the exact path agrees under them;
- properties on random trees and cells: integer, non-negative, every parent exactly the sum of
  its children in every cell, deterministic, rows independent, and a non-negative integer tree
  is returned unchanged;
- the spec: ``consistency.nonnegative_integers`` is read for a places stream on its tree and
  refused, with the reason, for any other stream;
- replays (Fenwick, k-ary, per-level budgets, the 6,388-counter example in parts) and the
  daemon's release service: every record validates against the schema, the new maps have the
  counts' keys and the properties above in every period, and they are a function of the
  record's published ``counts``/``totals`` alone (recomputed from them, equal).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import numpy.typing as npt
import pytest
from scipy.optimize import minimize
from scipy.stats import chi2

from streamdp.consistency.nonnegative import (
    TopDownIntegers,
    closest_integer_split,
    exact_integer_split,
    nearest_nonnegative_integers,
    simplex_projection,
)
from streamdp.consistency.tree import Tree
from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.engine import EngineSpec
from streamdp.engine.periods import parse_instant
from streamdp.engine.replay import read_jsonl
from streamdp.engine.spec_loading import parse_spec
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant
from tests.consistent_draws import replay_lines
from tests.places_fixture import merged_parts, small_county_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "streamdp" / "examples"
SCHEMA = json.loads((ROOT / "schemas" / "consistent.schema.json").read_text())


# --- the maths ---------------------------------------------------------------------------


def _random_tree(rng: np.random.Generator, levels: int, fan_out: int) -> Tree:
    """A breadth-first parent array: every node of a level has 0..fan_out children (the root
    at least one)."""
    parent = [-1]
    level = [0]
    for _ in range(levels - 1):
        nxt = []
        for node in level:
            for _ in range(int(rng.integers(1 if node == 0 else 0, fan_out + 1))):
                parent.append(node)
                nxt.append(len(parent) - 1)
        if not nxt:
            break
        level = nxt
    return Tree(np.asarray(parent, dtype=np.int64))


def _children(tree: Tree) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for node, up in enumerate(tree.parent.tolist()[1:], start=1):
        kids[up].append(node)
    return kids


def _brute_split(values: list[float], total: int) -> tuple[list[int], float, int]:
    """The non-negative integer vector summing to ``total`` closest to ``values`` by exhaustive
    search, its squared distance, and how many vectors reach it (to 1e-9)."""
    best: list[int] = []
    cost, ties = np.inf, 0
    for head in itertools.product(range(total + 1), repeat=len(values) - 1):
        last = total - sum(head)
        if last < 0:
            continue
        x = [*head, last]
        here = float(sum((a - c) ** 2 for a, c in zip(x, values, strict=True)))
        if here < cost - 1e-9:
            best, cost, ties = x, here, 1
        elif here <= cost + 1e-9:
            ties += 1
    return best, cost, ties


def test_the_continuous_step_is_scipys_projection_onto_the_scaled_simplex() -> None:
    rng = np.random.default_rng(1)
    for _ in range(60):
        k = int(rng.integers(1, 7))
        c = rng.normal(0.0, 4.0, k)
        total = int(rng.integers(0, 12))
        got = simplex_projection(c[None, :], [total])[0]
        solved = minimize(
            lambda x, c=c: float(np.sum((x - c) ** 2)),
            np.full(k, total / k),
            jac=lambda x, c=c: 2 * (x - c),
            bounds=[(0.0, None)] * k,
            constraints=[
                {
                    "type": "eq",
                    "fun": lambda x, t=total: float(np.sum(x) - t),
                    "jac": np.ones_like,
                }
            ],
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        assert solved.success, solved.message
        np.testing.assert_allclose(got, solved.x, atol=1e-6)
        assert np.all(got >= 0)
        assert got.sum() == pytest.approx(total, abs=1e-9)


def test_the_integer_split_is_the_closest_vector_an_exhaustive_search_finds() -> None:
    rng = np.random.default_rng(2)
    checked = 0
    for _ in range(400):
        k = int(rng.integers(1, 5))
        values = rng.normal(1.0, 3.0, k).round(int(rng.integers(0, 3))).tolist()
        total = int(rng.integers(0, 8))
        got = closest_integer_split(np.asarray([values]), np.asarray([total]))[0].tolist()
        best, cost, ties = _brute_split(values, total)
        assert sum(got) == total
        assert min(got) >= 0
        mine = float(sum((a - c) ** 2 for a, c in zip(got, values, strict=True)))
        assert mine == pytest.approx(cost, abs=1e-9)  # always a closest vector
        if ties == 1:
            assert got == best
            checked += 1
        assert exact_integer_split(values, total) == got
    assert checked > 200


def test_the_float_path_equals_exact_rationals_on_ties_and_wide_magnitudes() -> None:
    """Rows of integers shifted by one amount (the projection's ties), repeated values, values
    rounded to decimals and magnitudes from 0.1 to 10^7: the vectorised split equals the
    exact-rational one on every row."""
    rng = np.random.default_rng(4)
    for trial in range(400):
        k = int(rng.integers(1, 40))
        scale = 10 ** rng.uniform(-1, 7)
        if trial % 3 == 0:
            c = rng.integers(-5, int(scale) + 5, (4, k)) + rng.normal(0, 3, (4, 1))
        else:
            c = rng.normal(0, scale, (4, k))
        if trial % 2:
            c = c.round(int(rng.integers(0, 3)))
        if trial % 5 == 0:
            c[:, : k // 2] = c[:, :1]
        totals = np.maximum(np.rint(c.sum(axis=1) + rng.normal(0, scale, 4)), 0).astype(np.int64)
        got = closest_integer_split(c, totals)
        for row in range(4):
            assert got[row].tolist() == exact_integer_split(c[row].tolist(), int(totals[row]))


def test_tie_keys_break_ties_and_the_exact_path_agrees() -> None:
    """Rows full of ties (integers shifted by one amount, repeated values) with random keys:
    the vectorised split equals the exact-rational one under the same keys, is still a
    closest vector, and the keys decide which tied sibling gets a unit."""
    rng = np.random.default_rng(8)
    for trial in range(300):
        k = int(rng.integers(2, 30))
        c = rng.integers(-3, 20, (3, k)) + rng.normal(0, 2, (3, 1))
        if trial % 2:
            c[:, : k // 2] = c[:, :1]
        totals = np.maximum(np.rint(c.sum(axis=1) + rng.normal(0, 3, 3)), 0).astype(np.int64)
        keys = rng.integers(0, 2**63, (3, k)).astype(np.uint64)
        got = closest_integer_split(c, totals, keys)
        plain = closest_integer_split(c, totals)
        for row in range(3):
            assert got[row].tolist() == exact_integer_split(
                c[row].tolist(), int(totals[row]), keys[row].tolist()
            )
            # same distance as the counter-order split: both are closest vectors
            assert np.sum((got[row] - c[row]) ** 2) == pytest.approx(
                np.sum((plain[row] - c[row]) ** 2), rel=1e-12, abs=1e-9
            )
    keys = np.asarray([[5, 1, 9]], dtype=np.uint64)
    assert closest_integer_split([[0.5, 0.5, 0.5]], [1], keys).tolist() == [[0, 1, 0]]
    assert closest_integer_split([[0.5, 0.5, 0.5]], [2], keys).tolist() == [[1, 1, 0]]


def test_public_keys_share_tied_units_fairly_over_periods() -> None:
    """A nation of 1 with four tied states of 0.25 each (every cell, every period): over 4,000
    periods, each state gets the unit about a quarter of the time (chi-square, p = 1e-6).
    Power check: counter order (no keys) gives the first state every unit and is rejected."""
    tree = Tree(np.asarray([-1, 0, 0, 0, 0], dtype=np.int64))
    cells, periods = 2, 4000
    values = np.tile(np.asarray([1.0, 0.25, 0.25, 0.25, 0.25]).repeat(cells), (periods, 1))
    rounding = TopDownIntegers(tree, cells)
    threshold = chi2.isf(1e-6, df=3)

    def statistic(estimates: npt.NDArray[np.int64]) -> float:
        wins = estimates[:, cells:].reshape(periods, 4, cells).sum(axis=(0, 2))
        expected = periods * cells / 4
        return float(np.sum((wins - expected) ** 2 / expected))

    fair = rounding(values, np.arange(periods))
    assert np.all(fair[:, cells:].reshape(periods, 4, cells).sum(axis=1) == 1)
    assert statistic(fair) < threshold
    assert statistic(rounding(values)) > threshold
    # a fixed function of the public salt: the same salt, the same estimates
    assert np.array_equal(rounding(values[:5], np.arange(5)), fair[:5])
    assert not np.array_equal(rounding(values[:50], np.arange(50) + 1), fair[:50])


def test_ties_go_to_the_counter_first_in_order_without_keys() -> None:
    assert closest_integer_split([[0.5, 0.5, 0.5]], [1]).tolist() == [[1, 0, 0]]
    assert closest_integer_split([[0.5, 0.5, 0.5]], [2]).tolist() == [[1, 1, 0]]
    assert closest_integer_split([[-3.0, -3.0]], [1]).tolist() == [[1, 0]]
    assert closest_integer_split([[2.0, 5.0]], [0]).tolist() == [[0, 0]]
    assert exact_integer_split([0.5, 0.5, 0.5], 2) == [1, 1, 0]
    # siblings one whole number apart tie exactly, at any magnitude and sign: projected to
    # 999.67, 1.67, 56.67 and -0.33 -> 0; the two units left go to the first two
    shifted = [[1000.25, 2.25, 57.25, -0.75]]
    assert closest_integer_split(shifted, [1058]).tolist() == [[1000, 2, 56, 0]]
    assert exact_integer_split(shifted[0], 1058) == [1000, 2, 56, 0]
    # a negative value kept positive by the shift: 0.33, 3.33, 1.33, the unit to the first
    assert closest_integer_split([[-0.25, 2.75, 0.75]], [5]).tolist() == [[1, 3, 1]]
    assert nearest_nonnegative_integers([-0.4, 0.5, 1.5, 2.5, 7.49]).tolist() == [0, 0, 2, 2, 7]


def _reference_top_down(values: list[float], tree: Tree) -> list[int]:
    """Root to its nearest non-negative integer, then every parent's integer split among its
    children by exhaustive search: the definition, node by node."""
    out = [0] * tree.size
    out[0] = max(0, round(values[0]))
    for node, kids in sorted(_children(tree).items()):
        best, _, ties = _brute_split([values[k] for k in kids], out[node])
        assert ties == 1  # random values: the closest vector is unique
        for k, x in zip(kids, best, strict=True):
            out[k] = x
    return out


def test_the_top_down_pass_is_the_node_by_node_reference() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        tree = _random_tree(rng, levels=3, fan_out=3)
        cells = int(rng.integers(1, 3))
        values = rng.normal(1.5, 2.0, (2, tree.size * cells))
        got = TopDownIntegers(tree, cells)(values)
        for row in range(2):
            for cell in range(cells):
                column = values[row, cell::cells].tolist()
                assert got[row, cell::cells].tolist() == _reference_top_down(column, tree)


def _tree_gaps(tree: Tree, x: npt.NDArray[np.int64], cells: int) -> int:
    """The largest |parent - sum of its children| over every row, inner place and cell."""
    gap = 0
    for node, kids in _children(tree).items():
        for cell in range(cells):
            own = x[:, node * cells + cell]
            below = sum(x[:, k * cells + cell] for k in kids)
            gap = max(gap, int(np.max(np.abs(own - below))))
    return gap


@pytest.mark.parametrize("seed", range(6))
def test_the_estimates_are_non_negative_integers_that_add_up_the_tree_in_every_cell(
    seed: int,
) -> None:
    rng = np.random.default_rng(10 + seed)
    tree = _random_tree(rng, levels=int(rng.integers(2, 5)), fan_out=int(rng.integers(1, 9)))
    cells = int(rng.integers(1, 5))
    rounding = TopDownIntegers(tree, cells)
    values = rng.normal(0.0, 10.0 ** rng.uniform(-1, 3), (7, tree.size * cells))
    got = rounding(values)
    assert got.dtype == np.int64
    assert got.shape == values.shape
    assert np.all(got >= 0)
    assert _tree_gaps(tree, got, cells) == 0
    # deterministic, and each row on its own
    assert np.array_equal(rounding(values), got)
    assert np.array_equal(TopDownIntegers(tree, cells)(values[::-1])[::-1], got)
    assert np.array_equal(rounding(values[3:4]), got[3:4])
    # a non-negative integer tree is already its own estimate
    assert np.array_equal(rounding(got.astype(np.float64)), got)


def test_huge_values_take_the_exact_path_and_still_add_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import streamdp.consistency.nonnegative as module

    exact = module.exact_integer_split
    calls: list[int] = []

    def counted(values: list[float], total: int, keys: list[int] | None = None) -> list[int]:
        calls.append(total)
        return exact(values, total, keys)

    monkeypatch.setattr(module, "exact_integer_split", counted)
    # floats near 1e18 are 128 apart: the float split cannot place these units
    total = 3 * 10**18 + 1000
    got = closest_integer_split([[1e18, 1e18, 1e18]], [total])
    assert got.tolist() == [[10**18 + 334, 10**18 + 333, 10**18 + 333]]
    assert calls == [total]
    # and through a tree: non-negative and adding up exactly
    tree = Tree(np.asarray([-1, 0, 0, 0, 1, 1, 2], dtype=np.int64))
    values = np.asarray(
        [[3.1e18, 1.2e18 + 512, 0.9e18, 1e18 - 2048, 6e17, 6e17 + 4096, 0.9e18]], dtype=np.float64
    )
    got = TopDownIntegers(tree)(values)
    assert np.all(got >= 0)
    assert _tree_gaps(tree, got, 1) == 0


# --- the spec ----------------------------------------------------------------------------


def _county_text(consistency: str, constraints: str = 'constraints = { kind = "tree" }') -> str:
    text = (EXAMPLES / "county_admissions.toml").read_text(encoding="utf-8")
    text = text.replace("consistency = { every_periods = 7, at_epoch_end = true }", consistency)
    return text.replace('constraints = { kind = "tree" }', constraints)


def test_the_option_is_read_for_a_places_stream_on_its_tree() -> None:
    origin = str(EXAMPLES / "county_admissions.toml")
    plain = parse_spec(_county_text("consistency = { every_periods = 7 }"), origin=origin)
    assert not plain.streams["admissions-by-county"].consistency.nonnegative_integers
    on = parse_spec(
        _county_text("consistency = { every_periods = 7, nonnegative_integers = true }"),
        origin=origin,
    )
    assert on.streams["admissions-by-county"].consistency.nonnegative_integers
    assert on.fingerprint() != plain.fingerprint()  # it changes what revisions publish


@pytest.mark.parametrize(
    ("consistency", "constraints", "message"),
    [
        ("nonnegative_integers = 1", 'kind = "tree"', "must be true or false"),
        ("nonnegative_integers = true", 'kind = "none"', r'needs constraints = \{ kind = "tree"'),
    ],
)
def test_the_option_is_refused_off_the_tree(
    consistency: str, constraints: str, message: str
) -> None:
    text = _county_text(f"consistency = {{ {consistency} }}", f"constraints = {{ {constraints} }}")
    with pytest.raises(ConfigError, match=f"consistency.nonnegative_integers.*{message}"):
        parse_spec(text, origin=str(EXAMPLES / "county_admissions.toml"))


def test_the_option_is_refused_for_a_stream_that_is_not_places() -> None:
    text = (EXAMPLES / "restaurant.toml").read_text(encoding="utf-8")
    assert "consistency = {" in text
    text = text.replace("consistency = {", "consistency = { nonnegative_integers = true,", 1)
    with pytest.raises(ConfigError, match=r"applies to places streams only.*counts 'items'"):
        parse_spec(text, origin=str(EXAMPLES / "restaurant.toml"))


# --- replays and the daemon --------------------------------------------------------------


def _with_nonnegative(spec: EngineSpec, **changes: Any) -> EngineSpec:
    streams = {
        name: replace(
            stream,
            consistency=replace(stream.consistency, nonnegative_integers=True),
            **changes,
        )
        for name, stream in spec.streams.items()
    }
    return replace(spec, streams=streams)


def _lines(spec: EngineSpec, periods: int, rate: float, seed: int) -> list[str]:
    return [
        line.text for line in generate("county-admissions", periods, rate, seed=seed, spec=spec)
    ]


_INTEGER_MAPS = {"counts": "nonnegative_counts", "totals": "nonnegative_totals"}


def _merged_with_integers(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`merged_parts`, the integer maps merged too."""
    merged = merged_parts(parts)
    at = {(r["revision"], r["epoch"], r["period"]): r for r in merged}
    for record in merged:
        for field in _INTEGER_MAPS.values():
            record[field] = {}
    for part in parts:
        held = at[(part["revision"], part["epoch"], part["period"])]
        for field in _INTEGER_MAPS.values():
            assert not held[field].keys() & part[field].keys()
            held[field].update(part[field])
    return merged


def _check_records(spec: EngineSpec, parts: list[dict[str, Any]], periods: int) -> None:
    """Every part validates; per period, the integer maps have the counts' keys, are
    non-negative integers adding up the tree in every cell, and are recomputed from the
    record's published counts and totals alone."""
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    cells = stream.counters.width // places.size
    rounding = TopDownIntegers(places.tree, cells)
    names = stream.counters.names
    for part in parts:
        jsonschema.validate(part, SCHEMA)
        assert part["nonnegative_method"] == "top_down_rounding"
    merged = _merged_with_integers(parts)
    assert sorted(r["period"] for r in merged) == list(range(1, periods + 1))
    negative = 0
    for record in merged:
        for values, integers in _INTEGER_MAPS.items():
            assert list(record[integers]) == list(names)
            assert all(type(x) is int for x in record[integers].values())
            got = np.asarray([[record[integers][name] for name in names]], dtype=np.int64)
            assert np.all(got >= 0)
            assert _tree_gaps(places.tree, got, cells) == 0
            # a function of the published consistent values and the public period only
            published = np.asarray([[record[values][name] for name in names]])
            period = record["epoch"] * stream.horizon + record["period"] - 1
            assert np.array_equal(rounding(published, [period]), got)
            negative += int(np.sum(published < 0))
    assert negative  # the noise made consistent values negative: the estimates did work


SPECS = {
    "fda": lambda: _with_nonnegative(small_county_spec()),
    "kary_gls": lambda: _with_nonnegative(small_county_spec(), mechanism="kary_gls"),
    "level weights": lambda: _with_nonnegative(small_county_spec(level_weights=(1, 1, 2))),
}


@pytest.mark.parametrize("label", list(SPECS))
def test_a_replay_publishes_the_estimates_in_every_period(label: str, tmp_path: Path) -> None:
    spec = SPECS[label]()
    periods = 5
    out = replay_lines(spec, _lines(spec, periods, 6.0, seed=3), periods, tmp_path, seed=4)
    parts = read_jsonl(out / "consistent.jsonl")
    assert parts
    _check_records(spec, parts, periods)
    # the option off publishes none of the fields, and the same consistent values
    plain = replace(spec, streams={
        n: replace(s, consistency=replace(s.consistency, nonnegative_integers=False))
        for n, s in spec.streams.items()
    })  # fmt: skip
    plain_out = replay_lines(plain, _lines(spec, periods, 6.0, seed=3), periods, tmp_path / "p", 4)
    plain_parts = read_jsonl(plain_out / "consistent.jsonl")
    assert [{k: v for k, v in p.items() if not k.startswith("nonnegative_")} for p in parts] == (
        plain_parts
    )


def test_the_wide_example_publishes_the_estimates_in_parts_under_the_limit(
    tmp_path: Path,
) -> None:
    spec = _with_nonnegative(example_spec("county-admissions"))
    periods = 2
    out = replay_lines(spec, _lines(spec, periods, 100.0, seed=5), periods, tmp_path, seed=6)
    parts = read_jsonl(out / "consistent.jsonl")
    # six maps per counter instead of four: more parts, each well under 1 MB
    assert {p["parts"] for p in parts} == {5}  # three without the estimates
    assert max(len(json.dumps(p)) for p in parts) < 500_000
    _check_records(spec, parts, periods)


def test_the_release_service_publishes_the_replays_estimates(tmp_path: Path) -> None:
    """The daemon's release service runs the same revisions: records arriving a minute after
    they happened, in hourly batches, with the public clock's tick between them, publish the
    replay's consistent records, integer maps included (same seeded noise)."""
    spec = _with_nonnegative(small_county_spec())
    periods = 4
    lines = _lines(spec, periods, 8.0, seed=7)
    out = replay_lines(spec, lines, periods, tmp_path, seed=8)
    expected = read_jsonl(out / "consistent.jsonl")
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
    revisions = [p for p in published if p["kind"] == "consistent"]
    assert {r["period"] for r in revisions} == set(range(1, periods + 1))
    assert all("nonnegative_counts" in r for r in revisions)
    assert sorted(revisions, key=lambda r: r["key"]) == sorted(expected, key=lambda r: r["key"])
