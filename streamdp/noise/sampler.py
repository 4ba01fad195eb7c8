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


#: Largest noise scale (counts) a node may get. The discrete Laplace tail is
#: ``P(|Z| >= k) = 2 q^k / (1 + q) <= 2 exp(-k / b)``; at ``b = 2^40`` a node's noise reaches
#: ``2^56`` with probability below ``2 exp(-2^16)`` (about 10^-28462), so a sum of up to 64 noisy
#: nodes stays below ``2^62`` in magnitude and no int64 (OpenDP's sampling domain, and every
#: release) saturates or wraps while the true counts stay below ``2^61``; the reported standard
#: deviations stay finite (``sd <= 2^47``).
MAX_NOISE_SCALE = 2.0**40
#: Smallest noise scale: below it ``1/b`` overflows the float maths of the variances and the
#: noise is zero with probability ``1 - 2 exp(-2^40)`` (no privacy left to state).
MIN_NOISE_SCALE = 2.0**-40


def check_scale(scale: float) -> float:
    """Validate a noise scale (must be a finite number > 0) and return it as a float."""
    value = float(scale)
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigError(
            f"noise scale must be a finite number > 0, got {scale!r}; "
            "check epsilon (> 0) and the sensitivity (> 0)"
        )
    return value


def check_draw_scale(scale: float) -> float:
    """:func:`check_scale`, and within ``[MIN_NOISE_SCALE, MAX_NOISE_SCALE]``: what a sampler
    draws at (the spec, the planner and the counters refuse other scales first, naming the
    node; this keeps a draw outside the range impossible whatever the caller)."""
    value = check_scale(scale)
    if not MIN_NOISE_SCALE <= value <= MAX_NOISE_SCALE:
        raise ConfigError(
            f"noise scale {value!r} is outside the sampler's safe range [2^-40, 2^40]: beyond it "
            "the discrete Laplace can saturate int64 (or, below it, no privacy is left to state)"
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
