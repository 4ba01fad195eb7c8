"""A revision projects only the nodes its new periods read (streamdp/engine/revision.py,
``consistent_periods``): the values of any span of periods are bit for bit those of the whole
epoch, agree with the batch projection and read-path sums (the reference) to rounding, and
cost the read paths of the span, not the epoch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import streamdp.engine.revision as revision_module
from streamdp.engine.revision import consistent_periods, prefix_sums, project_nodes
from streamdp.engine.spec import StreamSpec
from streamdp.synth import example_spec
from tests.places_fixture import small_county_spec


def _stream(scenario: str, mechanism: str) -> StreamSpec:
    if scenario == "places":
        stream = next(iter(small_county_spec().streams.values()))
    else:
        stream = next(iter(example_spec(scenario).streams.values()))
    return replace(stream, mechanism=mechanism)


def _reference(
    spec: StreamSpec, values: np.ndarray, carry: np.ndarray, variances: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Every node projected in one batch, then the mechanism's prefix sums (the old path)."""
    prefix = prefix_sums(spec.mechanism, project_nodes(spec, values, variances))
    counts = np.diff(prefix, axis=0, prepend=np.zeros((1, prefix.shape[1])))
    return counts, prefix + carry


CASES = [
    (scenario, mechanism)
    for scenario in ("restaurant", "census", "places")
    for mechanism in ("fda", "binary", "naive")
]


@pytest.mark.parametrize(("scenario", "mechanism"), CASES)
def test_any_span_gives_the_whole_epochs_bits_and_the_reference_values(
    scenario: str, mechanism: str
) -> None:
    spec = _stream(scenario, mechanism)
    rng = np.random.default_rng(7)
    n = 23
    values = rng.integers(-40, 200, size=(n, spec.counters.width))
    carry = rng.normal(size=spec.counters.width) * 100
    whole_counts, whole_totals = consistent_periods(spec, values, carry)
    ref_counts, ref_totals = _reference(spec, values, carry, None)
    np.testing.assert_allclose(whole_counts, ref_counts, rtol=0, atol=1e-9)
    np.testing.assert_allclose(whole_totals, ref_totals, rtol=0, atol=1e-9)
    for first in range(1, n + 2):
        counts, totals = consistent_periods(spec, values, carry, first=first)
        assert counts.shape == totals.shape == (n - first + 1, spec.counters.width)
        assert np.array_equal(counts, whole_counts[first - 1 :])  # bit for bit
        assert np.array_equal(totals, whole_totals[first - 1 :])


def test_a_places_stream_with_level_budgets_projects_each_node_under_its_own_variances() -> None:
    spec = next(iter(small_county_spec(level_weights=(1, 2, 4)).streams.values()))
    rng = np.random.default_rng(3)
    n = 17
    values = rng.integers(-20, 90, size=(n, spec.counters.width))
    variances = rng.uniform(0.5, 40.0, size=(n, 3))  # per node and level
    carry = np.zeros(spec.counters.width)
    counts, totals = consistent_periods(spec, values, carry, group_variances=variances)
    ref_counts, ref_totals = _reference(spec, values, carry, variances)
    np.testing.assert_allclose(counts, ref_counts, rtol=0, atol=1e-9)
    np.testing.assert_allclose(totals, ref_totals, rtol=0, atol=1e-9)
    late, _ = consistent_periods(spec, values, carry, first=12, group_variances=variances)
    assert np.array_equal(late, counts[11:])
    # a wrong node's variances give other values: the rows are matched to their nodes
    shifted = consistent_periods(spec, values, carry, group_variances=variances[::-1].copy())
    assert not np.allclose(shifted[0], counts)


def test_a_late_span_projects_only_the_read_paths_it_needs(monkeypatch) -> None:
    """Periods 359..365 of a 365-day epoch: the read paths of 358..365, not 365 nodes."""
    spec = _stream("places", "fda")
    n = 365
    values = np.ones((n, spec.counters.width), dtype=np.int64)
    projected: list[int] = []

    def counting(stream_spec, rows, group_variances=None):
        projected.append(rows.shape[0])
        return project_nodes(stream_spec, rows, group_variances)

    monkeypatch.setattr(revision_module, "project_nodes", counting)
    counts, totals = consistent_periods(spec, values, np.zeros(spec.counters.width), first=359)
    paths: set[int] = set()
    for period in range(358, n + 1):
        t = period
        while t:
            paths.add(t)
            t &= t - 1
    assert sum(projected) == len(paths) <= 20
    assert counts.shape == totals.shape == (7, spec.counters.width)
