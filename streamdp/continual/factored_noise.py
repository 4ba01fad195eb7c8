"""The node noise of one epoch of a k-ary counter: drawn once, decoded, optionally projected
(DESIGN §3 "Beyond FDA").

Level ``l`` gets discrete Laplace noise of scale ``Delta / (epsilon * budget_l)`` rounded up
(:func:`level_scales`); :func:`draw_epoch_noise` draws every node of the epoch at once, one
sampler call per level (``size = blocks x width``, label ``<label>|e<epoch>|L<l>``).
:class:`EpochNoise` holds that draw (or the stored draw it adopted instead) and its decoding
``n = M z`` (:meth:`streamdp.continual.kary.KaryStrategy.decode_noise`), computed once per
epoch in O(nodes) and read in O(1) per release.

``projection`` (a symmetric idempotent ``width x width`` matrix ``P``, optional): the decoded
noise of every period is ``P n_t``. When the exact counts always satisfy the public constraints
``P`` projects onto (``P s = s``), release ``t = s_t + P n_t = P (s_t + n_t)`` is consistent at
publication, still post-processing of the noisy nodes, and counter ``j``'s variance is ``P_jj``
times the unprojected one.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_config import exact_scale
from streamdp.continual.privacy import (
    MAX_NOISE_SCALE,
    MIN_NOISE_SCALE,
    Epsilon,
    check_privacy,
    exact_epsilon,
)
from streamdp.errors import ConfigError, StateError
from streamdp.noise.sampler import NoiseSampler, discrete_laplace_variance

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def level_scales(strategy: KaryStrategy, epsilon: Epsilon, sensitivity: float) -> list[float]:
    """Noise scale of each level, ``Delta / (epsilon * budget_l)`` rounded up so the loss is at
    most ``epsilon * budget_l`` exactly, against epsilon as written (``0.1`` = 1/10).

    Raises :class:`ConfigError` when a scale leaves ``[2^-40, 2^40]`` (see
    :data:`streamdp.continual.privacy.MAX_NOISE_SCALE`).
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


def draw_epoch_noise(  # noqa: PLR0917 - the counter's noise parameters, in its own order
    strategy: KaryStrategy,
    scales: list[float],
    width: int,
    sampler: NoiseSampler,
    noise_label: str,
    epoch: int,
) -> Int64Array:
    """Every node's noise of ``epoch``, shape ``(nodes, width)``, one sampler call per level;
    the whole epoch's draw happens here. :class:`StateError` if the sampler returns a wrong
    shape."""
    parts = []
    for level, blocks in enumerate(strategy.blocks):
        scale = scales[level]
        size = blocks * width
        if noise_label:
            label = f"{noise_label}|e{epoch}|L{level}"
            noise = np.asarray(sampler.discrete_laplace(scale, size, label=label))
        else:
            noise = np.asarray(sampler.discrete_laplace(scale, size))
        if noise.shape != (size,):
            raise StateError(
                f"sampler {sampler.name!r} returned shape {noise.shape}, expected ({size},)"
            )
        parts.append(noise.astype(np.int64).reshape(blocks, width))
    return np.concatenate(parts)


class EpochNoise:
    """Every node's noise of one epoch (``nodes``, shape ``(nodes, width)``, None until drawn
    or adopted), each node's noise variance (``node_var``, ``(nodes,)``) and the decoded
    noise of every period's running total (``decoded``, ``(horizon, width)``, projected)."""

    def __init__(
        self,
        strategy: KaryStrategy,
        epsilon: Epsilon,
        sensitivity: float,
        width: int,
        projection: FloatArray | None,
    ) -> None:
        self.strategy = strategy
        self.width = width
        self.scales = level_scales(strategy, epsilon, sensitivity)
        level_var = np.array([discrete_laplace_variance(b) for b in self.scales])
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
        self.decoded: FloatArray = np.zeros((0, self.width))

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
                    self.strategy, self.scales, self.width, sampler, noise_label, epoch
                )
            )
        assert self.nodes is not None
        return self.nodes

    def _set(self, z: Int64Array) -> None:
        noise = self.strategy.decode_noise(z.astype(np.float64), self.node_var)
        if self.projection is not None:
            noise = noise @ self.projection  # P symmetric: each row n_t becomes P n_t
        self.nodes, self.decoded = z, noise
