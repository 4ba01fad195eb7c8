"""One interface over both counter kinds, so the engine has one code path for every mechanism.

:class:`streamdp.continual.counter.ContinualCounter` (``fda``, ``binary``, ``naive``: one node
drawn per period close) and :class:`streamdp.continual.factored_counter.FactoredCounter`
(``kary_digits``, ``kary_gls``: every node drawn at the epoch's first close) both satisfy
:class:`CounterBank`. :func:`open_bank` and :func:`restore_bank` are the only places that
choose between them (by the strategy's type, or the state's ``kind``).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streamdp.continual.blt_counter import STATE_KIND as BLT_KIND
from streamdp.continual.blt_counter import BltCounter, BltStrategy
from streamdp.continual.counter import ContinualCounter
from streamdp.continual.counter_state import STATE_KIND as CONTINUAL_KIND
from streamdp.continual.factored_counter import FactoredCounter
from streamdp.continual.factored_state import STATE_KIND as FACTORED_KIND
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.grouped_bank import STATE_KIND as GROUPED_KIND
from streamdp.continual.grouped_bank import GroupedBank
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.strategy import Strategy
from streamdp.errors import ConfigError, StateError
from streamdp.noise.sampler import NoiseSampler

FloatArray = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]


class BankRelease(Protocol):
    """What one period close returns (arrays of shape ``(width,)``)."""

    @property
    def noisy_count(self) -> npt.NDArray[Any]: ...

    @property
    def noisy_total(self) -> npt.NDArray[Any]: ...

    @property
    def count_std(self) -> float | FloatArray:
        """One for every counter, or one per counter (a grouped bank's)."""
        ...

    @property
    def total_std(self) -> float | FloatArray: ...


class CounterBank(Protocol):
    """A bank of ``width`` counters of one stream for one epoch."""

    width: int

    @property
    def epoch(self) -> int: ...

    @property
    def carry_variance(self) -> float: ...

    @property
    def horizon(self) -> int: ...

    @property
    def periods_closed(self) -> int: ...

    @property
    def integral_releases(self) -> bool: ...

    def close_period(
        self, counts: npt.NDArray[np.int64], *, stored: Any | None = None
    ) -> BankRelease: ...

    def next_epoch(self) -> CounterBank: ...

    def noisy_nodes(self) -> tuple[Int64Array, Int64Array, FloatArray]: ...

    @property
    def node_count(self) -> int: ...

    def nodes_from(self, first: int) -> list[Int64Array]: ...

    def released(self, first: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]: ...

    def total_variance(self, t: int) -> float | FloatArray: ...

    def count_variance(self, t: int) -> float | FloatArray: ...

    def count_std(self, t: int) -> float | FloatArray: ...

    def total_std(self, t: int) -> float | FloatArray: ...

    def epoch_noise(self) -> Int64Array | None: ...

    def adopt_noise(self, node_noise: Any) -> None: ...

    def state(self, *, with_noise: bool = True, with_nodes: bool = True) -> dict[str, Any]: ...


def open_bank(
    strategy: Strategy | KaryStrategy | BltStrategy,
    epsilon: float,
    sensitivity: float,
    width: int,
    sampler: NoiseSampler,
    *,
    noise_label: str = "",
    projection: FloatArray | None = None,
    gaussian: GaussianBudget | None = None,
) -> CounterBank:
    """A fresh epoch-0 bank for ``strategy``. ``projection`` applies to the k-ary strategies
    only (their noise is known at the epoch's start; see
    :class:`~streamdp.continual.factored_counter.FactoredCounter`). ``gaussian``: a zCDP
    stream's budget (discrete Gaussian node noise; one-node-per-period strategies)."""
    if isinstance(strategy, BltStrategy):
        if gaussian is None:
            raise ConfigError("the blt mechanism runs under zCDP only (discrete Gaussian noise)")
        return BltCounter(
            strategy,
            epsilon,
            sensitivity,
            width,
            sampler,
            gaussian=gaussian,
            noise_label=noise_label,
            projection=projection,
        )
    if isinstance(strategy, KaryStrategy):
        return FactoredCounter(
            strategy,
            epsilon,
            sensitivity,
            width,
            sampler,
            noise_label=noise_label,
            projection=projection,
            gaussian=gaussian,
        )
    if projection is not None:
        raise ConfigError(
            f"{strategy.mechanism} draws each node when its period closes, so its releases "
            "cannot be projected at publication; its consistency comes from revisions"
        )
    return ContinualCounter(
        strategy, epsilon, sensitivity, width, sampler, noise_label=noise_label, gaussian=gaussian
    )


def restore_bank(
    state: dict[str, Any], sampler: NoiseSampler, *, projection: FloatArray | None = None
) -> CounterBank:
    """Restore :meth:`CounterBank.state` output without drawing (:class:`StateError` if the
    state is of no known kind or malformed)."""
    kind = state.get("kind")
    if kind == BLT_KIND:
        return BltCounter.from_state(state, sampler, projection=projection)
    if kind == FACTORED_KIND:
        return FactoredCounter.from_state(state, sampler, projection=projection)
    if kind == CONTINUAL_KIND:
        return ContinualCounter.from_state(state, sampler)
    if kind == GROUPED_KIND:
        return GroupedBank.from_state(state, sampler)
    raise StateError(
        f"counter state of kind {kind!r} is none of {CONTINUAL_KIND!r}, {FACTORED_KIND!r}, "
        f"{BLT_KIND!r}, {GROUPED_KIND!r}"
    )
