"""Production noise: OpenDP's exact discrete Laplace sampler with OS entropy.

OpenDP 0.16 samples the discrete Laplace distribution exactly when ``make_laplace`` is built on an
integer domain (Canonne, Kamath and Steinke 2020 sampler, randomness from the operating system).
We feed it a vector of zeros, so its output is the noise itself; the caller adds it to the true
value. The "contrib" feature flag is OpenDP's opt-in for components outside its vetted core.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.noise.sampler import check_scale, check_size


@lru_cache(maxsize=256)
def _measurement(scale: float) -> Any:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale
    )


def opendp_privacy_loss(scale: float, sensitivity: int) -> float:
    """OpenDP's privacy map of the measurement the sampler runs at ``scale``: the epsilon it
    guarantees for inputs ``sensitivity`` apart in L1 (rounded up, as OpenDP always does)."""
    b = check_scale(scale)
    return float(_measurement(b).map(int(sensitivity)))


class OpenDPDiscreteLaplace:
    """Exact discrete Laplace noise from OpenDP, seeded by the OS (secure, not reproducible)."""

    name = "opendp-discrete-laplace"
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

    def __repr__(self) -> str:
        return "OpenDPDiscreteLaplace()"
