"""Input checks the counters share: a horizon, a bank's width, epoch and carried variance, and
integer count vectors of the bank's width."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.errors import ConfigError

Int64Array = npt.NDArray[np.int64]


def check_horizon(horizon: int) -> int:
    """``horizon`` (the number of releases ``N``) as an ``int >= 1``, else :class:`ConfigError`
    (every strategy, factorization and optimiser checks it here)."""
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer) or horizon < 1:
        raise ConfigError(
            f"horizon must be an integer >= 1 (the number of releases N), got {horizon!r}"
        )
    return int(horizon)


def check_bank(width: int, epoch: int, carry_variance: float) -> None:
    """Raise :class:`ConfigError` unless a counter bank's width, epoch and carried variance
    are valid (shared by every counter kind)."""
    if isinstance(width, bool) or not isinstance(width, int | np.integer) or width < 1:
        raise ConfigError(f"width (number of counters) must be an integer >= 1, got {width!r}")
    if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
        raise ConfigError(f"epoch must be an integer >= 0, got {epoch!r}")
    if not math.isfinite(carry_variance) or carry_variance < 0.0:
        raise ConfigError(f"carry_variance must be a finite number >= 0, got {carry_variance!r}")


def int_vector(values: Any, width: int, what: str) -> Int64Array:
    """``values`` as an int64 vector of shape ``(width,)``, or :class:`ConfigError`."""
    array = np.asarray(values)
    if array.shape != (width,):
        raise ConfigError(f"{what} must have shape ({width},), got shape {array.shape}")
    if array.dtype.kind not in "iub":
        raise ConfigError(f"{what} must be integers, got dtype {array.dtype}")
    return array.astype(np.int64)
