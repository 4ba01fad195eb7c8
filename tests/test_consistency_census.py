"""Census release (seed 000): ANOVA exact path, FGMC approximation and sparse vs dense."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdp.consistency import CensusVariances, census_residuals
from streamdp.errors import ConfigError
from streamdp.papers import census_approximation, census_release


def max_diff(a, b) -> float:  # type: ignore[no-untyped-def]
    parts = [a[0] - b[0], *(x - y for x, y in zip(a[1], b[1], strict=True)), a[2] - b[2]]
    return max(float(np.max(np.abs(p))) for p in parts)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    regions=st.integers(1, 3),
    weighted=st.booleans(),
)
def test_every_method_equals_dense_reference(
    seed: int, sizes: list[int], regions: int, weighted: bool
) -> None:
    rng = np.random.default_rng(seed)
    t = rng.normal(0, 20, regions)
    s = [rng.normal(0, 5, (regions, n)) for n in sizes]
    m = rng.normal(0, 2, (regions, *sizes))
    var = (
        CensusVariances(
            float(rng.uniform(0.2, 4)),
            tuple(rng.uniform(0.2, 4, len(sizes))),
            float(rng.uniform(0.2, 4)),
        )
        if weighted
        else None
    )
    ref = census_release(t, s, m, "dense", variances=var)
    assert np.max(np.abs(census_residuals(*ref))) < 1e-9
    for method in ("exact", "sparse"):
        got = census_release(t, s, m, method, variances=var)  # type: ignore[arg-type]
        assert max_diff(got, ref) < 1e-9
        assert np.max(np.abs(census_residuals(*got))) < 1e-9
    if not weighted:
        tol = 1e-11
        approx = census_approximation(t, s, m, tol=tol)
        assert max_diff((approx.total, approx.marginals, approx.cells), ref) < 1e4 * tol
        dev = np.array(approx.deviations)
        assert np.all(np.diff(dev) <= 1e-12 * max(1.0, dev[0]))


def test_exact_path_chunks_many_regions_and_one_region_alike() -> None:
    rng = np.random.default_rng(9)
    sizes = (2, 7, 23)
    R = 2000
    t, m = rng.normal(0, 50, R), rng.normal(0, 3, (R, *sizes))
    s = [rng.normal(0, 10, (R, n)) for n in sizes]
    import streamdp.consistency.census as census_module

    whole = census_release(t, s, m)
    old = census_module._CHUNK_VALUES
    census_module._CHUNK_VALUES = 322 * 7  # force chunks of 7 regions
    try:
        chunked = census_release(t, s, m)
    finally:
        census_module._CHUNK_VALUES = old
    assert max_diff(whole, chunked) < 1e-9
    single = census_release(t[:1], [x[:1] for x in s], m[:1])
    assert max_diff(single, (whole[0][:1], [x[:1] for x in whole[1]], whole[2][:1])) < 1e-9


def test_consistent_truth_is_a_fixed_point() -> None:
    rng = np.random.default_rng(4)
    m = rng.integers(0, 30, (5, 2, 3, 4)).astype(float)
    s = [m.sum(axis=(2, 3)), m.sum(axis=(1, 3)), m.sum(axis=(1, 2))]
    t = m.sum(axis=(1, 2, 3))
    for method in ("exact", "fgmc"):
        got = census_release(t, s, m, method)  # type: ignore[arg-type]
        assert max_diff(got, (t, s, m)) < 1e-9


def test_bad_census_inputs_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="marginal 1"):
        census_release(np.zeros(2), [np.zeros((2, 2)), np.zeros((2, 4))], np.zeros((2, 2, 3)))
    with pytest.raises(ConfigError, match="cells must have shape"):
        census_release(np.zeros(2), [np.zeros((2, 2))], np.zeros((3, 2)))
    with pytest.raises(ConfigError, match="unweighted"):
        census_release(
            np.zeros(1),
            [np.zeros((1, 2))],
            np.zeros((1, 2)),
            "fgmc",
            variances=CensusVariances(1.0, (1.0,), 1.0),
        )
