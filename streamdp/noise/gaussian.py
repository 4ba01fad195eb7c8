"""The discrete Gaussian distribution: its exact variance, its safe range and the sampler
interface that draws it (zCDP streams, DESIGN §2 "Privacy definitions").

The discrete Gaussian with parameter ``sigma`` puts ``P(k) ~ exp(-k^2 / (2 sigma^2))`` on the
integers (Canonne, Kamath and Steinke 2020, "The Discrete Gaussian for Differential Privacy",
Definition 1). Adding it to an integer query of L2 sensitivity ``Delta_2`` gives
``rho = Delta_2^2 / (2 sigma^2)``-zCDP (their Theorem 4: the same as the continuous Gaussian),
and its variance is strictly below ``sigma^2`` (their Corollary 9), so the variance streamdp
reports is the exact one computed here, not ``sigma^2``.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError
from streamdp.noise.sampler import NoiseSampler

#: Largest ``sigma``: a node's noise passes ``2^56`` with probability below
#: ``exp(-2^31)``, so sums of up to 64 noisy values stay inside int64 (as for the discrete
#: Laplace's :data:`streamdp.noise.sampler.MAX_NOISE_SCALE`).
MAX_GAUSSIAN_SIGMA = 2.0**40
#: Smallest ``sigma``: below it the noise is nonzero with probability about ``2 exp(-2^79)``:
#: no privacy left to state.
MIN_GAUSSIAN_SIGMA = 2.0**-40
#: Above this ``sigma`` the exact variance and ``sigma^2`` are the same float64: the relative gap
#: is below ``8 pi^2 sigma^2 exp(-2 pi^2 sigma^2)`` (Poisson summation), about 10^-545 here.
_VARIANCE_IS_SIGMA_SQUARED = 8.0


def check_sigma(sigma: float) -> float:
    """Validate a discrete Gaussian parameter (finite, inside the safe range); return a float."""
    value = float(sigma)
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigError(
            f"discrete Gaussian sigma must be a finite number > 0, got {sigma!r}; check rho "
            "(> 0) and the L2 sensitivity (> 0)"
        )
    if not MIN_GAUSSIAN_SIGMA <= value <= MAX_GAUSSIAN_SIGMA:
        raise ConfigError(
            f"discrete Gaussian sigma {value:.6g} is outside the sampler's safe range "
            "[2^-40, 2^40]; choose rho and the sensitivity so that every node's sigma lies "
            "inside it"
        )
    return value


def discrete_gaussian_variance(sigma: float) -> float:
    """Exact variance of the discrete Gaussian with parameter ``sigma``:
    ``sum k^2 e^{-k^2/2s^2} / sum e^{-k^2/2s^2}`` over the integers, summed out to
    ``|k| <= 40 sigma + 2`` (the tail beyond is below ``e^{-800}`` of the total) for
    ``sigma <= 8``, and ``sigma^2`` above (equal in float64, see
    :data:`_VARIANCE_IS_SIGMA_SQUARED`). Always at most ``sigma^2``."""
    s = check_sigma(sigma)
    if s > _VARIANCE_IS_SIGMA_SQUARED:
        return s * s
    support = np.arange(1, math.ceil(40.0 * s) + 3, dtype=np.float64)
    weights = np.exp(-(support * support) / (2.0 * s * s))
    mass = 1.0 + 2.0 * math.fsum(weights.tolist())
    second = 2.0 * math.fsum((support * support * weights).tolist())
    return min(second / mass, s * s)


def discrete_gaussian_rho(sigma: float, l2_sensitivity: float) -> float:
    """``Delta_2^2 / (2 sigma^2)``: the zCDP of one discrete Gaussian release (reference; the
    budgets are checked exactly where they are set)."""
    s = check_sigma(sigma)
    return float(l2_sensitivity) ** 2 / (2.0 * s * s)


@runtime_checkable
class GaussianNoiseSampler(NoiseSampler, Protocol):
    """A sampler that also draws the discrete Gaussian (the samplers zCDP streams need).

    ``discrete_gaussian(sigma, size)`` returns ``size`` i.i.d. integers with
    ``P(k) ~ exp(-k^2 / (2 sigma^2))``; shape ``(size,)``, int64. ``label`` as for
    :meth:`NoiseSampler.discrete_laplace`. ``gaussian_name`` names this draw in release
    records, as ``name`` names the discrete Laplace's.
    """

    gaussian_name: str

    def discrete_gaussian(
        self, sigma: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]: ...


def gaussian_sampler(sampler: NoiseSampler) -> GaussianNoiseSampler:
    """``sampler`` as one that draws the discrete Gaussian, or :class:`ConfigError` if it cannot
    (a zCDP stream needs one; both of streamdp's samplers can)."""
    if not isinstance(sampler, GaussianNoiseSampler):
        raise ConfigError(
            f"sampler {getattr(sampler, 'name', sampler)!r} cannot draw the discrete Gaussian a "
            "zCDP stream needs"
        )
    return sampler
