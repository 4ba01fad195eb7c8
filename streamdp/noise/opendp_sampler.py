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

import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.noise.gaussian import check_sigma
from streamdp.noise.sampler import check_draw_scale, check_scale, check_size


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


#: A draw of at least this many values is split into chunks drawn on several threads at once:
#: OpenDP samples in Rust with the GIL released, so a wide stream's node noise (a million
#: counters) uses every core. Each value is still one independent exact draw from OS entropy;
#: the chunks are concatenated in order.
PARALLEL_MIN = 65_536
#: Threads drawing at once (the machine's cores, at most 4).
NOISE_THREADS = max(1, min(4, os.cpu_count() or 1))


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=NOISE_THREADS, thread_name_prefix="streamdp-noise")


def chunk_sizes(n: int, threads: int | None = None) -> list[int]:
    """How a draw of ``n`` values is split: one chunk below :data:`PARALLEL_MIN` (or with one
    thread), else ``threads`` (default :data:`NOISE_THREADS`) chunks (fewer if a chunk would
    hold under half of :data:`PARALLEL_MIN`) differing in size by at most one."""
    threads = NOISE_THREADS if threads is None else threads
    if n < PARALLEL_MIN or threads <= 1:
        return [n]
    parts = max(1, min(threads, n // (PARALLEL_MIN // 2)))
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _draw(measurement: Any, n: int) -> npt.NDArray[np.int64]:
    """``n`` values of ``measurement`` applied to zeros (its noise), in parallel chunks."""
    sizes = chunk_sizes(n)
    if len(sizes) == 1:
        return np.asarray(measurement([0] * n), dtype=np.int64)
    chunks = list(_pool().map(lambda k: measurement([0] * k), sizes))
    return np.concatenate([np.asarray(chunk, dtype=np.int64) for chunk in chunks])


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
        b = check_draw_scale(scale)
        n = check_size(size)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return _draw(_measurement(b), n)

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
        return _draw(_gaussian_measurement(s), n)

    def __repr__(self) -> str:
        return "OpenDPDiscreteLaplace()"
