"""The node noise of one epoch of a k-ary counter: drawn once, then decoded in exact fixed
point (DESIGN §3 "Beyond FDA", §2 "Publish from noisy values only").

Level ``l`` gets discrete Laplace noise of scale ``Delta / (epsilon * budget_l)`` rounded up
(:func:`level_scales`); :func:`draw_epoch_noise` draws every node of the epoch at once, one
sampler call per level (``size = blocks x width``, label ``<label>|e<epoch>|L<l>``).
:class:`EpochNoise` holds that draw (or the stored draw it adopted instead) and its decoding
``D(z)`` (:meth:`streamdp.continual.kary.KaryStrategy.decode_noise_fixed`), exact integers in
units of ``2^-FRACTION_BITS``, computed once per epoch in O(nodes) and read in O(1) per
release. It is kept split as ``whole + fraction * 2^-FRACTION_BITS`` so a release
``s_t + D(z)_t`` is an exact int64 sum (:meth:`EpochNoise.noisy_totals`).

``projection`` (a symmetric idempotent ``width x width`` matrix ``P``, optional) is held for
the counter, which applies it to the noisy totals (never to the noise alone: a float
``s + P n`` would depend on how ``s + n`` splits into count and noise).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from streamdp.continual.fixed_point import fixed_to_float, split_fixed
from streamdp.continual.gaussian_budgets import GaussianBudget, exact_sigma
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_config import exact_scale
from streamdp.continual.privacy import (
    Epsilon,
    check_privacy,
    exact_epsilon,
)
from streamdp.errors import ConfigError, StateError
from streamdp.noise.gaussian import (
    MAX_GAUSSIAN_SIGMA,
    MIN_GAUSSIAN_SIGMA,
    discrete_gaussian_variance,
    gaussian_sampler,
)
from streamdp.noise.sampler import (
    MAX_NOISE_SCALE,
    MIN_NOISE_SCALE,
    NoiseSampler,
    discrete_laplace_variance,
)

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def level_scales(strategy: KaryStrategy, epsilon: Epsilon, sensitivity: float) -> list[float]:
    """Noise scale of each level, ``Delta / (epsilon * budget_l)`` rounded up so the loss is at
    most ``epsilon * budget_l`` exactly, against epsilon as written (``0.1`` = 1/10).

    Raises :class:`ConfigError` when a scale leaves ``[2^-40, 2^40]`` (see
    :data:`streamdp.noise.sampler.MAX_NOISE_SCALE`).
    """
    check_privacy(epsilon, sensitivity)
    eps = exact_epsilon(epsilon)
    scales = [exact_scale(float(sensitivity), eps, share) for share in strategy.budgets]
    for level, scale in enumerate(scales):
        if not MIN_NOISE_SCALE <= scale <= MAX_NOISE_SCALE:
            raise ConfigError(
                f"epsilon {float(eps):.6g} with sensitivity {sensitivity:g} gives level {level} of "
                f"{strategy.mechanism} the noise scale {scale:.6g}, outside [2^-40, 2^40]; "
                "choose epsilon and the sensitivity so that sensitivity / epsilon is within "
                "about 2^38"
            )
    return scales


def level_sigmas(strategy: KaryStrategy, gaussian: GaussianBudget) -> list[float]:
    """Discrete Gaussian sigma of each level under zCDP: level ``l`` spends
    ``rho * budget_l`` (a record touches one block per level and the budgets add up to at most
    1 exactly), its sigma rounded up until ``l2^2 / (2 sigma^2)`` is at most that share in
    exact rationals. :class:`ConfigError` outside the sampler's safe range."""
    sigmas = [
        exact_sigma(gaussian.l2_squared, gaussian.rho * Fraction(share))
        for share in strategy.budgets
    ]
    for level, sigma in enumerate(sigmas):
        if not MIN_GAUSSIAN_SIGMA <= sigma <= MAX_GAUSSIAN_SIGMA:
            raise ConfigError(
                f"rho {float(gaussian.rho):.6g} with squared L2 bound {gaussian.l2_squared} gives "
                f"level {level} of {strategy.mechanism} the sigma {sigma:.6g}, outside the "
                "sampler's safe range [2^-40, 2^40]"
            )
    return sigmas


def draw_epoch_noise(  # noqa: PLR0917 - the counter's noise parameters, in its own order
    strategy: KaryStrategy,
    scales: list[float],
    width: int,
    sampler: NoiseSampler,
    noise_label: str,
    epoch: int,
    *,
    gaussian: bool = False,
) -> Int64Array:
    """Every node's noise of ``epoch``, shape ``(nodes, width)``, one sampler call per level;
    the whole epoch's draw happens here: discrete Laplace of the level's scale, or with
    ``gaussian`` the discrete Gaussian of the level's sigma. :class:`StateError` if the sampler
    returns a wrong shape."""
    parts = []
    for level, blocks in enumerate(strategy.blocks):
        scale = scales[level]
        size = blocks * width
        label = f"{noise_label}|e{epoch}|L{level}" if noise_label else ""
        if gaussian:
            noise = np.asarray(
                gaussian_sampler(sampler).discrete_gaussian(scale, size, label=label)
            )
        else:
            noise = np.asarray(sampler.discrete_laplace(scale, size, label=label))
        if noise.shape != (size,):
            raise StateError(
                f"sampler {sampler.name!r} returned shape {noise.shape}, expected ({size},)"
            )
        parts.append(noise.astype(np.int64).reshape(blocks, width))
    return np.concatenate(parts)


def project_rows(values: FloatArray, projection: FloatArray) -> FloatArray:
    """Every row ``x`` of ``values`` (shape ``(n, width)``) mapped to ``P x`` (``P`` symmetric).

    Summed in one fixed order (counter by counter, elementwise numpy operations only), so each
    output row is the same float64 function of its input row however many rows are projected
    together: a release projected at its close and recomputed later in a batch agree bit for
    bit (a BLAS product may pick another kernel, and another summation order, by shape).
    """
    out = np.zeros_like(values, dtype=np.float64)
    for i in range(projection.shape[0]):
        out += values[:, i : i + 1] * projection[i]
    return out


class EpochNoise:
    """Every node's noise of one epoch (``nodes``, shape ``(nodes, width)``, None until drawn
    or adopted), each node's noise variance (``node_var``, ``(nodes,)``) and the decoded
    noise of every period's running total in exact fixed point, split as ``whole`` and
    ``fraction`` (each ``(horizon, width)`` int64; never projected)."""

    def __init__(
        self,
        strategy: KaryStrategy,
        epsilon: Epsilon,
        sensitivity: float,
        width: int,
        projection: FloatArray | None,
        *,
        gaussian: GaussianBudget | None = None,
    ) -> None:
        self.strategy = strategy
        self.width = width
        self.gaussian = gaussian
        if gaussian is None:  # discrete Laplace scales per level
            self.scales = level_scales(strategy, epsilon, sensitivity)
            level_var = np.array([discrete_laplace_variance(b) for b in self.scales])
        else:  # zCDP: discrete Gaussian sigmas per level
            self.scales = level_sigmas(strategy, gaussian)
            level_var = np.array([discrete_gaussian_variance(s) for s in self.scales])
        self.node_var: FloatArray = level_var[strategy.node_levels]
        self.projection: FloatArray | None = None
        if projection is not None:
            matrix = np.asarray(projection, dtype=np.float64)
            if matrix.shape != (self.width, self.width):
                raise ConfigError(
                    f"projection must have shape ({self.width}, {self.width}), got {matrix.shape}"
                )
            self.projection = matrix
        self.nodes: Int64Array | None = None
        # D(z) = whole + fraction * 2^-FRACTION_BITS per release t (rows t - 1), exact
        self.whole: Int64Array = np.zeros((0, self.width), dtype=np.int64)
        self.fraction: Int64Array = np.zeros((0, self.width), dtype=np.int64)

    def adopt(self, node_noise: npt.ArrayLike, owner: str) -> None:
        """Use stored node noise instead of drawing it; :class:`StateError` (naming ``owner``)
        if the noise was already drawn or ``node_noise`` has the wrong shape or type."""
        if self.nodes is not None:
            raise StateError(
                f"{owner} already has its node noise; stored noise can only be adopted before "
                "it is drawn"
            )
        z = np.asarray(node_noise)
        if z.shape != (self.strategy.node_count, self.width) or z.dtype.kind not in "iu":
            raise StateError(
                f"node noise must be integers of shape ({self.strategy.node_count}, "
                f"{self.width}), got {z.dtype} {z.shape}"
            )
        self._set(z.astype(np.int64))

    def draw(self, sampler: NoiseSampler, noise_label: str, epoch: int) -> Int64Array:
        """The node noise, drawn now (labelled by ``noise_label`` and ``epoch``) if it was not
        drawn or adopted yet."""
        if self.nodes is None:
            self._set(
                draw_epoch_noise(
                    self.strategy,
                    self.scales,
                    self.width,
                    sampler,
                    noise_label,
                    epoch,
                    gaussian=self.gaussian is not None,
                )
            )
        assert self.nodes is not None
        return self.nodes

    def _set(self, z: Int64Array) -> None:
        decoded = self.strategy.decode_noise_fixed(z, self.node_var)
        self.whole, self.fraction = split_fixed(decoded)
        self.nodes = z

    def noisy_totals(self, exact_totals: Int64Array, periods: Int64Array) -> FloatArray:
        """Unprojected released running totals ``s_t + D(z)_t`` as float64, shape
        ``(n, width)``, for the 1-based ``periods`` (shape ``(n,)``; period 0 gives zeros) with
        exact running totals ``exact_totals`` (shape ``(n, width)``).

        The sum is exact (int64: whole parts add, the fraction is the noise's), and equals the
        fixed-point decoding of the noisy nodes ``D(y)_t`` (shift-equivariance), so the float
        returned is a deterministic function of the noisy nodes alone.
        """
        rows = np.asarray(periods, dtype=np.int64) - 1
        started = rows >= 0
        safe = np.maximum(rows, 0)
        whole = np.where(started[:, None], exact_totals + self.whole[safe], 0)
        fraction = np.where(started[:, None], self.fraction[safe], 0)
        return fixed_to_float(whole, fraction)
