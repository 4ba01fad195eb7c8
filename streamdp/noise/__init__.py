"""Noise samplers. Production code gets its sampler from :func:`production_sampler` only."""

from __future__ import annotations

from streamdp.noise.gaussian import GaussianNoiseSampler, discrete_gaussian_variance
from streamdp.noise.insecure import InsecureSeededSampler
from streamdp.noise.opendp_sampler import OpenDPDiscreteLaplace
from streamdp.noise.sampler import (
    NoiseSampler,
    discrete_laplace_variance,
    laplace_variance,
)

__all__ = [
    "GaussianNoiseSampler",
    "InsecureSeededSampler",
    "NoiseSampler",
    "OpenDPDiscreteLaplace",
    "discrete_gaussian_variance",
    "discrete_laplace_variance",
    "laplace_variance",
    "production_sampler",
]


def production_sampler() -> NoiseSampler:
    """The one sampler production configuration can use: exact, OS entropy (OpenDP)."""
    return OpenDPDiscreteLaplace()
