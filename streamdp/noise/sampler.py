"""The noise-sampler interface and the exact variance of the discrete Laplace distribution.

Every noisy value streamdp publishes is drawn through a :class:`NoiseSampler`. The production
sampler (:class:`streamdp.noise.opendp_sampler.OpenDPDiscreteLaplace`) is exact and draws from OS
entropy; the seeded one (:class:`streamdp.noise.insecure.InsecureSeededSampler`) exists only for
tests and reproducible benchmarks and says so in its ``name`` and ``secure`` attributes.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError


@runtime_checkable
class NoiseSampler(Protocol):
    """A source of i.i.d. discrete Laplace noise.

    ``discrete_laplace(scale, size)`` returns ``size`` integers ``k`` with
    ``P(k) = (1 - q) / (1 + q) * q**|k|``, ``q = exp(-1/scale)``, i.e. proportional to
    ``exp(-|k| / scale)`` (the two-sided geometric distribution; Ghosh, Roughgarden and
    Sundararajan 2009). Shape ``(size,)``, dtype int64.

    ``label`` names the draw (e.g. ``"restaurant|e0|n12"``: stream, epoch, node). A secure sampler
    ignores it. The insecure seeded sampler derives a labelled draw from ``(seed, label)`` alone,
    so a test run that restarts from a snapshot reproduces exactly the draws an uninterrupted run
    makes, whatever order streams close in.
    """

    name: str
    secure: bool

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]: ...


def check_scale(scale: float) -> float:
    """Validate a noise scale (must be a finite number > 0) and return it as a float."""
    value = float(scale)
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigError(
            f"noise scale must be a finite number > 0, got {scale!r}; "
            "check epsilon (> 0) and the sensitivity (> 0)"
        )
    return value


def check_size(size: int) -> int:
    """Validate a sample count (an int >= 0)."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ConfigError(f"sample size must be an integer >= 0, got {size!r}")
    return int(size)


def discrete_laplace_variance(scale: float) -> float:
    """Exact variance of the discrete Laplace distribution with ``P(k) ~ exp(-|k|/scale)``.

    ``Var = 2 q / (1 - q)^2`` with ``q = exp(-1/scale)``. Computed as
    ``2 q / expm1(-1/scale)^2`` so that it stays accurate for large scales, where it tends to
    the continuous Laplace variance ``2 scale^2`` from below (``2 scale^2 - 1/6 + O(1/scale^2)``).
    """
    return float(discrete_laplace_variances(check_scale(scale)))


def discrete_laplace_variances(scales: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """:func:`discrete_laplace_variance` of every scale of an array (the scales already valid)."""
    b = np.asarray(scales, dtype=np.float64)
    out: npt.NDArray[np.float64] = 2.0 * np.exp(-1.0 / b) / np.expm1(-1.0 / b) ** 2
    return out


def laplace_variance(scale: float) -> float:
    """Variance ``2 scale^2`` of the continuous Laplace distribution (reference only)."""
    b = check_scale(scale)
    return 2.0 * b * b
