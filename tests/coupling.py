"""The coupling of neighbouring inputs used by the float-privacy tests (DESIGN §2).

Inputs ``D`` with node noise ``z`` and ``D + r`` with node noise ``z - R e`` (``e`` the record's
contribution, ``R`` the nodes covering its period) have the same noisy nodes ``y = R a + z``.
A release that is a function of ``y`` alone is then bit-identical under the two; a float
release computed as ``exact + float(noise)`` is not (issue 25). :class:`CoupledSampler` makes
the shifted noise: it wraps the seeded test sampler and subtracts a footprint from the labelled
draws that cover the record's period.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streamdp.continual.kary import KaryStrategy
from streamdp.noise import InsecureSeededSampler


def fenwick_cover(period: int, horizon: int) -> list[int]:
    """Fenwick nodes covering ``period`` (its update chain ``p, p + lowbit(p), ... <= N``)."""
    nodes = []
    node = period
    while node <= horizon:
        nodes.append(node)
        node += node & -node
    return nodes


@dataclass
class Footprint:
    """One record's effect: ``vector`` (per counter) added in ``period`` of ``epoch`` of the
    stream whose draws are labelled ``label``."""

    label: str
    epoch: int
    period: int
    vector: npt.NDArray[np.int64]


@dataclass
class CoupledSampler:
    """Seeded noise, minus the footprints of the records ``D + r`` adds (see the module)."""

    seed: int
    strategies: Mapping[str, object]  # label -> the stream's strategy
    footprints: Sequence[Footprint] = ()
    name: str = "insecure-seeded-numpy"
    gaussian_name: str = "insecure-seeded-numpy-gaussian"
    secure: bool = False
    _base: InsecureSeededSampler = field(init=False)

    def __post_init__(self) -> None:
        self._base = InsecureSeededSampler(self.seed)

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        return self._shifted(self._base.discrete_laplace(scale, size, label=label), label)

    def discrete_gaussian(
        self, sigma: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        return self._shifted(self._base.discrete_gaussian(sigma, size, label=label), label)

    def _shifted(self, noise: npt.NDArray[np.int64], label: str) -> npt.NDArray[np.int64]:
        """``noise`` minus every footprint on the draw ``label`` names (none when unlabelled)."""
        if not label:
            return noise
        stream, epoch_text, node_text = label.rsplit("|", 2)
        epoch = int(epoch_text[1:])
        for footprint in self.footprints:
            if footprint.label != stream or footprint.epoch != epoch:
                continue
            width = footprint.vector.shape[0]
            rows = noise.reshape(-1, width).copy()
            strategy = self.strategies[stream]
            if isinstance(strategy, KaryStrategy):  # one draw per level: block of the period
                level = int(node_text[1:])
                block = (footprint.period - 1) // strategy.branching**level
                if block < rows.shape[0]:
                    rows[block] -= footprint.vector
            else:  # one draw per node
                node = int(node_text[1:])
                horizon = int(strategy.horizon)
                mechanism = getattr(strategy, "mechanism", "")
                cover = (
                    [footprint.period]
                    if mechanism == "naive"
                    else fenwick_cover(footprint.period, horizon)
                )
                if node in cover:
                    rows[0] -= footprint.vector
            noise = rows.reshape(-1)
        return noise
