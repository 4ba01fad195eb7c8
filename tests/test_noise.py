"""Noise samplers: exact distribution (chi-square, >= 1e5 samples, p < 1e-6) with power checks,
the exact discrete-Laplace and discrete-Gaussian variances, and the production/insecure
separation."""

from __future__ import annotations

import itertools
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
from streamdp.noise.gaussian import (
    GaussianNoiseSampler,
    discrete_gaussian_rho,
    discrete_gaussian_variance,
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


def _chi2_discrete_gaussian_pvalue(samples: np.ndarray, sigma: float) -> float:
    """Chi-square goodness of fit against the discrete Gaussian pmf (computed here by direct
    normalisation, independently of the code under test): every integer with expected count
    >= 20 a bin, the two tails merged into one each."""
    from scipy import stats

    n = samples.size
    support = np.arange(-int(40 * sigma) - 3, int(40 * sigma) + 4)
    weights = np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma * sigma))
    pmf = weights / weights.sum()
    inner = support[n * pmf >= 20]
    K = int(inner.max())
    ks = np.arange(-K, K + 1)
    expected = n * pmf[np.isin(support, ks)]
    tail = (n - expected.sum()) / 2.0
    observed = np.array(
        [np.sum(samples < -K)] + [np.sum(samples == k) for k in ks] + [np.sum(samples > K)],
        dtype=np.float64,
    )
    exp_all = np.concatenate([[tail], expected, [tail]])
    keep = exp_all > 0
    return float(
        stats.chisquare(observed[keep], exp_all[keep] * observed.sum() / exp_all.sum()).pvalue
    )


@pytest.mark.parametrize("sigma", [0.6, 3.0])
def test_opendp_discrete_gaussian_matches_its_pmf_and_rejects_30pct_off(sigma: float) -> None:
    sampler = production_sampler()
    assert isinstance(sampler, GaussianNoiseSampler)
    samples = sampler.discrete_gaussian(sigma, N_SAMPLES)
    assert samples.shape == (N_SAMPLES,)
    assert samples.dtype == np.int64
    assert _chi2_discrete_gaussian_pvalue(samples, sigma) > P_THRESHOLD
    for off in (1.3, 1 / 1.3):  # power, both directions
        wrong = sampler.discrete_gaussian(sigma * off, N_SAMPLES)
        assert _chi2_discrete_gaussian_pvalue(wrong, sigma) < P_THRESHOLD


def test_insecure_discrete_gaussian_matches_its_pmf_and_is_reproducible() -> None:
    sigma = 2.2
    samples = InsecureSeededSampler(7).discrete_gaussian(sigma, N_SAMPLES)
    assert _chi2_discrete_gaussian_pvalue(samples, sigma) > P_THRESHOLD
    assert _chi2_discrete_gaussian_pvalue(samples, sigma * 1.3) < P_THRESHOLD
    again = InsecureSeededSampler(7).discrete_gaussian(sigma, N_SAMPLES)
    np.testing.assert_array_equal(samples, again)
    labelled = InsecureSeededSampler(7).discrete_gaussian(sigma, 50, label="s|e0|n1")
    np.testing.assert_array_equal(
        labelled, InsecureSeededSampler(7).discrete_gaussian(sigma, 50, label="s|e0|n1")
    )


@pytest.mark.parametrize("sigma", [0.2, 0.7, 1.0, 1.5, 3.0, 12.0])
def test_discrete_gaussian_variance_is_exact_and_below_sigma_squared(sigma: float) -> None:
    from fractions import Fraction

    # a reference in exact rationals from decimal expansions of the weights (mpmath-free):
    # direct summation with the weights in float, accumulated in Fraction (no cancellation)
    support = range(-int(40 * sigma) - 3, int(40 * sigma) + 4)
    weights = [Fraction(math.exp(-(k * k) / (2 * sigma * sigma))) for k in support]
    mass = sum(weights, Fraction(0))
    second = sum((Fraction(k * k) * w for k, w in zip(support, weights, strict=True)), Fraction(0))
    reference = float(second / mass)
    variance = discrete_gaussian_variance(sigma)
    assert variance == pytest.approx(reference, rel=1e-13)
    assert variance <= sigma * sigma
    if sigma <= 0.7:  # far from sigma^2 at small sigma: the report must not say sigma^2
        assert variance < 0.9999 * sigma * sigma


def test_opendp_discrete_gaussian_rho_is_delta_squared_over_two_sigma_squared() -> None:
    from streamdp.noise.opendp_sampler import opendp_gaussian_rho

    for sigma, delta in ((2.0, 1), (1.5, 3), (10.0, 7)):
        assert opendp_gaussian_rho(sigma, delta) == pytest.approx(
            discrete_gaussian_rho(sigma, delta), rel=1e-12
        )
        assert opendp_gaussian_rho(sigma, delta) >= delta * delta / (2 * sigma * sigma)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, 2.0**41, 2.0**-41])
def test_discrete_gaussian_sigma_outside_the_safe_range_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="sigma"):
        InsecureSeededSampler(1).discrete_gaussian(bad, 3)
    with pytest.raises(ConfigError, match="sigma"):
        discrete_gaussian_variance(bad)


def test_large_draws_are_split_in_chunks_that_add_up_in_order() -> None:
    from streamdp.noise import opendp_sampler

    assert opendp_sampler.chunk_sizes(opendp_sampler.PARALLEL_MIN - 1, 4) == [65_535]
    assert opendp_sampler.chunk_sizes(10**6, 1) == [10**6]
    for n, threads in [(65_536, 4), (100_001, 2), (10**6, 4), (200_000, 3)]:
        sizes = opendp_sampler.chunk_sizes(n, threads)
        assert sum(sizes) == n
        assert max(sizes) - min(sizes) <= 1
        assert min(sizes) >= opendp_sampler.PARALLEL_MIN // 2
        assert len(sizes) == min(threads, n // (opendp_sampler.PARALLEL_MIN // 2))

    def numbered(zeros: list[int]) -> list[int]:  # a measurement whose output names its chunk
        return [len(zeros)] * len(zeros)

    drawn = opendp_sampler._draw(numbered, 200_001)
    sizes = opendp_sampler.chunk_sizes(200_001)
    assert drawn.tolist() == [k for k in sizes for _ in range(k)]


def test_chunked_secure_draws_match_the_distribution_and_are_independent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parallel path (forced to 4 chunks whatever the machine's cores): the pooled draw
    and each chunk match the discrete Laplace, the 30%-off scale is rejected (power), and no
    chunk repeats another (each is fresh OS entropy)."""
    from streamdp.noise import opendp_sampler

    monkeypatch.setattr(opendp_sampler, "NOISE_THREADS", 4)
    scale, n = 2.0, 4 * 50_000
    assert opendp_sampler.chunk_sizes(n) == [50_000] * 4
    samples = production_sampler().discrete_laplace(scale, n)
    assert samples.shape == (n,)
    assert chi2_discrete_laplace_pvalue(samples, scale) > P_THRESHOLD
    assert chi2_discrete_laplace_pvalue(samples, scale * 1.3) < P_THRESHOLD
    chunks = samples.reshape(4, 50_000)
    for chunk in chunks:
        assert chi2_discrete_laplace_pvalue(chunk, scale) > P_THRESHOLD
    assert len({chunk.tobytes() for chunk in chunks}) == 4
    # neighbouring chunks are uncorrelated (|r| < 5 sd of r under independence)
    for a, b in itertools.pairwise(chunks):
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(50_000)
    gaussian = production_sampler().discrete_gaussian(1.5, n)
    assert _chi2_discrete_gaussian_pvalue(gaussian, 1.5) > P_THRESHOLD
