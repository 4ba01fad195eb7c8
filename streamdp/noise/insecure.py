"""INSECURE seeded noise for tests and reproducible benchmarks. Never use it to publish data.

A seeded pseudo-random generator is predictable: anyone who learns or guesses the seed can
subtract the noise. :func:`streamdp.noise.production_sampler` never returns this class, and the
class identifies itself with ``secure = False`` and a name that says "insecure".
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError
from streamdp.noise.gaussian import check_sigma
from streamdp.noise.sampler import check_draw_scale, check_size


def check_insecure_seed(seed: int | None) -> int | None:
    """``seed`` (``--insecure-seed``) if it is None or an integer >= 0, the seeds numpy's
    generator takes; else :class:`ConfigError`. Commands check it before starting anything."""
    if seed is not None and seed < 0:
        raise ConfigError(f"--insecure-seed must be an integer >= 0, got {seed}")
    return seed


class InsecureSeededSampler:
    """Discrete Laplace noise from numpy's PCG64 with a fixed seed (tests/benchmarks only).

    Uses that the difference of two i.i.d. geometric variables with success probability
    ``1 - q`` is discrete Laplace with ``P(k) ~ q^|k|``, ``q = exp(-1/scale)``.
    Floating-point ``q``, so only approximately exact; fine for tests, not for privacy.
    """

    name = "insecure-seeded-numpy"
    gaussian_name = "insecure-seeded-numpy-gaussian"
    secure = False

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        """``size`` i.i.d. draws with ``P(k) ~ exp(-|k|/scale)``; shape ``(size,)``, int64.

        Unlabelled draws continue one seeded sequence. A labelled draw uses a generator keyed
        by ``(seed, label)`` only, so it is reproducible across restarts and processes.
        """
        b = check_draw_scale(scale)
        n = check_size(size)
        rng = self._rng if not label else self._keyed(label)
        p = -math.expm1(-1.0 / b)  # success probability 1 - q
        a = rng.geometric(p, size=n)
        c = rng.geometric(p, size=n)
        return (a - c).astype(np.int64)

    def discrete_gaussian(
        self, sigma: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        """``size`` i.i.d. draws with ``P(k) ~ exp(-k^2 / (2 sigma^2))``; shape ``(size,)``.

        Canonne, Kamath and Steinke's rejection sampler (2020, Algorithm 3) in floating point:
        a discrete Laplace proposal of scale ``t = floor(sigma) + 1``, kept with probability
        ``exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2))``. Labelled draws as for
        :meth:`discrete_laplace`.
        """
        s = check_sigma(sigma)
        n = check_size(size)
        rng = self._rng if not label else self._keyed(label)
        t = math.floor(s) + 1
        p = -math.expm1(-1.0 / t)
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            want = max(2 * (n - filled), 16)
            y = rng.geometric(p, size=want) - rng.geometric(p, size=want)
            keep = rng.random(want) < np.exp(-((np.abs(y) - s * s / t) ** 2) / (2.0 * s * s))
            accepted = y[keep][: n - filled]
            out[filled : filled + accepted.size] = accepted
            filled += accepted.size
        return out

    def _keyed(self, label: str) -> np.random.Generator:
        digest = hashlib.sha256(label.encode("utf-8")).digest()
        words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 32, 4)]
        return np.random.default_rng(np.random.SeedSequence([self.seed & 0xFFFFFFFF, *words]))

    def __repr__(self) -> str:
        return f"InsecureSeededSampler(seed={self.seed})"
