"""What one period close of a counter bank publishes, for each counter kind."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PeriodRelease:
    """What one period close publishes for every counter of the bank.

    ``noisy_count`` shape ``(width,)``: ``s~_t - s~_{t-1}``. ``noisy_total`` shape ``(width,)``:
    ``s~_t`` plus the carried noisy total of earlier epochs. The standard deviations are exact
    (discrete Laplace) and identical for every counter of the bank; units: counts.
    """

    epoch: int
    period: int
    noisy_count: Int64Array
    noisy_total: Int64Array
    count_std: float
    total_std: float


@dataclass(frozen=True)
class FactoredRelease:
    """One period close of a :class:`~streamdp.continual.factored_counter.FactoredCounter`;
    fields as :class:`PeriodRelease` (arrays ``(width,)``, float64 for GLS, integer-valued for
    negative digits; standard deviations exact, discrete Laplace)."""

    epoch: int
    period: int
    noisy_count: FloatArray
    noisy_total: FloatArray
    count_std: float
    total_std: float
