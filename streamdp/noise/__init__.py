"""Noise samplers. Production code gets its sampler from :func:`production_sampler` only."""

from __future__ import annotations

from streamdp.noise.insecure import InsecureSeededSampler
from streamdp.noise.opendp_sampler import OpenDPDiscreteLaplace
from streamdp.noise.sampler import (
    NoiseSampler,
    discrete_laplace_variance,
    laplace_variance,
)

__all__ = [
    "InsecureSeededSampler",
    "NoiseSampler",
    "OpenDPDiscreteLaplace",
    "discrete_laplace_variance",
    "laplace_variance",
    "production_sampler",
]


def production_sampler() -> NoiseSampler:
    """The one sampler production configuration can use: exact, OS entropy (OpenDP)."""
    return OpenDPDiscreteLaplace()
