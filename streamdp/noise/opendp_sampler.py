"""Production noise: OpenDP's exact discrete Laplace and discrete Gaussian samplers with OS
entropy.

OpenDP 0.16 samples the discrete Laplace distribution exactly when ``make_laplace`` is built on an
integer domain (Canonne, Kamath and Steinke 2020 sampler, randomness from the operating system).
We feed it a vector of zeros, so its output is the noise itself; the caller adds it to the true
value. ``make_gaussian`` on the same integer domain samples the discrete Gaussian exactly (the
same paper's sampler), with zCDP as its privacy measure. The "contrib" feature flag is
OpenDP's opt-in for components outside its vetted core.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.noise.gaussian import check_sigma
from streamdp.noise.sampler import check_scale, check_size


@lru_cache(maxsize=256)
def _measurement(scale: float) -> Any:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale
    )


@lru_cache(maxsize=256)
def _gaussian_measurement(sigma: float) -> Any:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64"), sigma
    )


def opendp_gaussian_rho(sigma: float, l2_sensitivity: int) -> float:
    """OpenDP's privacy map of the discrete Gaussian measurement at ``sigma``: the rho (zCDP) it
    guarantees for inputs ``l2_sensitivity`` apart in L2 (rounded up, as OpenDP always does)."""
    return float(_gaussian_measurement(check_sigma(sigma)).map(int(l2_sensitivity)))


def opendp_privacy_loss(scale: float, sensitivity: int) -> float:
    """OpenDP's privacy map of the measurement the sampler runs at ``scale``: the epsilon it
    guarantees for inputs ``sensitivity`` apart in L1 (rounded up, as OpenDP always does)."""
    b = check_scale(scale)
    return float(_measurement(b).map(int(sensitivity)))


class OpenDPDiscreteLaplace:
    """Exact discrete Laplace (and discrete Gaussian) noise from OpenDP, seeded by the OS
    (secure, not reproducible)."""

    name = "opendp-discrete-laplace"
    gaussian_name = "opendp-discrete-gaussian"
    secure = True

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        """``size`` i.i.d. draws with ``P(k) ~ exp(-|k|/scale)``; shape ``(size,)``, int64.

        ``label`` is ignored: every draw is fresh OS entropy.
        """
        del label
        b = check_scale(scale)
        n = check_size(size)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        noise = _measurement(b)([0] * n)
        return np.asarray(noise, dtype=np.int64)

    def discrete_gaussian(
        self, sigma: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        """``size`` i.i.d. draws with ``P(k) ~ exp(-k^2 / (2 sigma^2))``; shape ``(size,)``,
        int64. ``label`` is ignored: every draw is fresh OS entropy."""
        del label
        s = check_sigma(sigma)
        n = check_size(size)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(_gaussian_measurement(s)([0] * n), dtype=np.int64)

    def __repr__(self) -> str:
        return "OpenDPDiscreteLaplace()"
