"""Noise samplers: exact distribution (chi-square, >= 1e5 samples, p < 1e-6) with power checks,
the exact discrete-Laplace variance, and the production/insecure separation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from stats_continual import P_THRESHOLD, chi2_discrete_laplace_pvalue, discrete_laplace_pmf

from streamdp.errors import ConfigError
from streamdp.noise import (
    InsecureSeededSampler,
    NoiseSampler,
    OpenDPDiscreteLaplace,
    discrete_laplace_variance,
    production_sampler,
)

N_SAMPLES = 100_000


def test_production_sampler_is_the_secure_opendp_one() -> None:
    sampler = production_sampler()
    assert isinstance(sampler, OpenDPDiscreteLaplace)
    assert isinstance(sampler, NoiseSampler)
    assert sampler.secure is True
    insecure = InsecureSeededSampler(1)
    assert insecure.secure is False
    assert "insecure" in insecure.name


@pytest.mark.parametrize("scale", [0.7, 4.0])
def test_opendp_sampler_matches_discrete_laplace_and_rejects_30pct_off(scale: float) -> None:
    sampler = production_sampler()
    samples = sampler.discrete_laplace(scale, N_SAMPLES)
    assert samples.shape == (N_SAMPLES,)
    assert samples.dtype == np.int64
    assert chi2_discrete_laplace_pvalue(samples, scale) > P_THRESHOLD
    # power: the same test rejects draws whose scale is 30% off, in both directions
    for off in (1.3, 1 / 1.3):
        wrong = sampler.discrete_laplace(scale * off, N_SAMPLES)
        assert chi2_discrete_laplace_pvalue(wrong, scale) < P_THRESHOLD


def test_insecure_sampler_matches_discrete_laplace_and_is_reproducible() -> None:
    scale = 2.5
    samples = InsecureSeededSampler(7).discrete_laplace(scale, N_SAMPLES)
    assert chi2_discrete_laplace_pvalue(samples, scale) > P_THRESHOLD
    assert chi2_discrete_laplace_pvalue(samples, scale * 1.3) < P_THRESHOLD
    again = InsecureSeededSampler(7).discrete_laplace(scale, N_SAMPLES)
    np.testing.assert_array_equal(samples, again)


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0, 50.0])
def test_discrete_laplace_variance_is_exact(scale: float) -> None:
    # direct summation of k^2 P(k) over a range holding all but ~1e-30 of the mass
    K = int(80 * scale) + 50
    k = np.arange(-K, K + 1)
    direct = float(np.sum(k.astype(np.float64) ** 2 * discrete_laplace_pmf(k, scale)))
    assert discrete_laplace_variance(scale) == pytest.approx(direct, rel=1e-12)
    # and it is not the continuous 2 b^2 (which overstates it by ~1/6)
    assert discrete_laplace_variance(scale) < 2 * scale * scale


def test_discrete_laplace_variance_large_scale_limit() -> None:
    b = 1e6
    assert discrete_laplace_variance(b) == pytest.approx(2 * b * b - 1 / 6, rel=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_scale_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="scale"):
        production_sampler().discrete_laplace(bad, 3)
    with pytest.raises(ConfigError, match="scale"):
        discrete_laplace_variance(bad)


def test_zero_size() -> None:
    assert production_sampler().discrete_laplace(1.0, 0).shape == (0,)


def test_labelled_insecure_draws_depend_only_on_seed_and_label() -> None:
    """A labelled draw is reproducible whatever was drawn before (restart safety in tests),
    and different labels or seeds give different draws."""
    first = InsecureSeededSampler(11)
    second = InsecureSeededSampler(11)
    second.discrete_laplace(3.0, 50)  # advance the unlabelled sequence: must not matter
    a = first.discrete_laplace(3.0, 1000, label="s|e0|n5")
    b = second.discrete_laplace(3.0, 1000, label="s|e0|n5")
    assert np.array_equal(a, b)
    assert not np.array_equal(a, first.discrete_laplace(3.0, 1000, label="s|e0|n6"))
    assert not np.array_equal(
        a, InsecureSeededSampler(12).discrete_laplace(3.0, 1000, label="s|e0|n5")
    )


def test_secure_sampler_ignores_labels() -> None:
    """The label never makes secure noise reproducible: two labelled draws differ."""
    sampler = production_sampler()
    a = sampler.discrete_laplace(50.0, 200, label="x")
    b = sampler.discrete_laplace(50.0, 200, label="x")
    assert not np.array_equal(a, b)
