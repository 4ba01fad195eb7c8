"""A bank of continual counters that closes one period at a time (DESIGN §3, seed 001).

The ``width`` counters of a bank share one strategy: the same nodes, the same weights and so the
same noise scales; one event may touch several of them, and ``sensitivity`` (Delta) bounds its
total L1 contribution over the bank in its period. Node ``i`` gets discrete Laplace noise of scale
``Delta / (epsilon * lambda_i)``; the sensitivity constraint on the weights makes the whole epoch
``epsilon``-DP per event.

When period ``t`` closes, node ``t`` becomes final: ``c_t = a_t + sum of c_j`` over its children
(``j + lowbit(j) = t``), noise is drawn for node ``t`` only (one vectorised draw of ``width``
values), and the release is the read-path sum of noisy nodes. Raw partial sums are kept only for
finalised nodes whose parent is still open: at most ``floor(log2 N) + 1`` of them.

Persistence: :meth:`ContinualCounter.state` returns plain data holding every noisy node drawn so
far; :meth:`ContinualCounter.from_state` restores it without drawing, so a restart republishes
identical values (drawing again would let an observer average the noise away). Both are in
:mod:`streamdp.continual.counter_state`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter_checks import check_bank, int_vector
from streamdp.continual.counter_state import continual_state, restore_continual
from streamdp.continual.gaussian_budgets import GaussianBudget, gaussian_node_sigmas, node_variances
from streamdp.continual.node_budgets import node_scales
from streamdp.continual.privacy import check_privacy
from streamdp.continual.releases import PeriodRelease
from streamdp.continual.strategy import Strategy
from streamdp.continual.variance import scale_variances
from streamdp.errors import HorizonError, StateError
from streamdp.noise.gaussian import gaussian_sampler
from streamdp.noise.sampler import NoiseSampler

Int64Array = npt.NDArray[np.int64]


class ContinualCounter:
    """A bank of ``width`` counters sharing one strategy (same nodes, same noise scales)."""

    #: releases are integers (sums of integer node values)
    integral_releases = True

    def __init__(
        self,
        strategy: Strategy,
        epsilon: float,
        sensitivity: float,
        width: int,
        sampler: NoiseSampler,
        *,
        epoch: int = 0,
        carry: Int64Array | None = None,
        carry_variance: float = 0.0,
        noise_label: str = "",
        gaussian: GaussianBudget | None = None,
    ) -> None:
        # under zCDP (``gaussian``) ``epsilon`` is the (epsilon, delta) bound, reported only
        self.epsilon, self.sensitivity = check_privacy(epsilon, sensitivity)
        self.gaussian = gaussian
        check_bank(width, epoch, carry_variance)
        self.strategy = strategy
        self.width = int(width)
        self.sampler = sampler
        self.noise_label = str(noise_label)
        self.epoch = int(epoch)
        self.carry: Int64Array = (
            np.zeros(self.width, dtype=np.int64)
            if carry is None
            else int_vector(carry, self.width, "carry")
        )
        self.carry_variance = float(carry_variance)
        if gaussian is None:  # discrete Laplace: node scales b_i
            self._scales = node_scales(strategy, self.epsilon, self.sensitivity)
            self._node_var = scale_variances(self._scales, "discrete-laplace")
        else:  # discrete Gaussian: node sigmas
            self._scales = gaussian_node_sigmas(strategy, gaussian)
            self._node_var = node_variances(self._scales)
        self._closed = 0
        self._pending: dict[int, Int64Array] = {}  # raw sums of final nodes with an open parent
        self._noisy: list[Int64Array] = []  # noisy node t at index t-1
        self._last_total: Int64Array = np.zeros(self.width, dtype=np.int64)  # s~_t, no carry

    # ------------------------------------------------------------------ read-only views
    @property
    def periods_closed(self) -> int:
        """Number of periods of this epoch already closed (0..horizon)."""
        return self._closed

    @property
    def horizon(self) -> int:
        """Periods per epoch."""
        return self.strategy.horizon

    @property
    def pending_nodes(self) -> list[int]:
        """Nodes whose raw partial sums are still held (at most ``floor(log2 N) + 1``)."""
        return sorted(self._pending)

    @property
    def node_variances(self) -> npt.NDArray[np.float64]:
        """Exact noise variance of every node of an epoch, shape ``(horizon,)`` (a copy)."""
        return self._node_var.copy()

    def total_variance(self, t: int) -> float:
        """Exact ``Var(s~_t)`` of this epoch's tree (carry excluded); ``Var(s~_0) = 0``."""
        return self.strategy.total_variance(self._node_var, t)

    def count_variance(self, t: int) -> float:
        """Exact ``Var(s~_t - s~_{t-1})`` (see :mod:`streamdp.continual.variance`)."""
        return self.strategy.count_variance(self._node_var, t)

    # ------------------------------------------------------------------ releasing
    def close_period(
        self,
        counts: npt.NDArray[np.int64],
        *,
        stored: Any | None = None,
        noise: Int64Array | None = None,
    ) -> PeriodRelease:
        """Close the next period with its true counts (shape ``(width,)``) and release it.

        Draws noise for node ``t`` only, unless ``stored`` is given: node ``t``'s noisy value
        as drawn and stored before a crash lost the rest of that step; it is used as it is and
        never drawn again. Raises :class:`HorizonError` past the horizon (roll into
        :meth:`next_epoch`) and :class:`ConfigError` for counts of the wrong shape/type.
        ``noise``: node ``t``'s noise as drawn by :meth:`draw_next` (a grouped bank draws every
        group's before any group closes). The counter is unchanged if anything raises
        (including the sampler).
        """
        t = self._closed + 1
        if t > self.horizon:
            raise HorizonError(
                f"epoch {self.epoch} already released all {self.horizon} periods of its horizon; "
                "call next_epoch() to start a new epoch (its totals carry this epoch's noisy total)"
            )
        a = int_vector(counts, self.width, "counts")
        kids = self.strategy.children(t)
        raw = a.copy()
        for j in kids:
            raw += self._pending[j]
        if stored is not None:
            noisy_t = int_vector(stored, self.width, "stored noisy node")
        else:
            drawn = self._draw(t) if noise is None else int_vector(noise, self.width, "noise")
            noisy_t = raw + drawn
        # commit: the noisy node is stored before anything derived from it is returned
        self._noisy.append(noisy_t)
        for j in kids:
            del self._pending[j]
        if self.strategy.parent(t) is not None:
            self._pending[t] = raw
        self._closed = t
        total = self.strategy.next_total(self._noisy, t, self._last_total)
        count = total - self._last_total
        self._last_total = total
        return PeriodRelease(
            epoch=self.epoch,
            period=t,
            noisy_count=count,
            noisy_total=total + self.carry,
            count_std=self.count_std(t),
            total_std=self.total_std(t),
        )

    def count_std(self, t: int) -> float:
        """Declared standard deviation of period ``t``'s released count (exact: integers)."""
        return math.sqrt(self.count_variance(t))

    def total_std(self, t: int) -> float:
        """Declared standard deviation of running total ``t``, carry included (exact)."""
        return math.sqrt(self.total_variance(t) + self.carry_variance)

    def draw_next(self) -> Int64Array:
        """Fresh noise for the node of the next period to close, for :meth:`close_period`'s
        ``noise`` (drawn once: the caller uses it for that close or discards it)."""
        t = self._closed + 1
        if t > self.horizon:
            raise HorizonError(f"epoch {self.epoch} has no period left to draw noise for")
        return self._draw(t)

    def _draw(self, t: int) -> Int64Array:
        """Fresh noise for node ``t`` (labelled by stream, epoch and node when labelled)."""
        scale = float(self._scales[t - 1])
        label = f"{self.noise_label}|e{self.epoch}|n{t}" if self.noise_label else ""
        if self.gaussian is None:
            noise = np.asarray(self.sampler.discrete_laplace(scale, self.width, label=label))
        else:
            noise = np.asarray(
                gaussian_sampler(self.sampler).discrete_gaussian(scale, self.width, label=label)
            )
        if noise.shape != (self.width,):
            raise StateError(
                f"sampler {self.sampler.name!r} returned shape {noise.shape}, expected "
                f"({self.width},)"
            )
        return noise.astype(np.int64)

    def noisy_nodes(self) -> tuple[Int64Array, Int64Array, npt.NDArray[np.float64]]:
        """Every finalised node of this epoch: ``(indices (n,), noisy values (n, width),
        noise variances (n,))``; indices 1-based, variances exact (discrete Laplace)."""
        n = self._closed
        values = np.stack(self._noisy) if n else np.zeros((0, self.width), dtype=np.int64)
        return (
            np.arange(1, n + 1, dtype=np.int64),
            values,
            self._node_var[:n].copy(),
        )

    @property
    def node_count(self) -> int:
        """Number of noisy nodes drawn in this epoch (one per closed period)."""
        return len(self._noisy)

    def nodes_from(self, first: int) -> list[Int64Array]:
        """The noisy nodes of this epoch from 0-based position ``first`` on, in drawing order
        (read only): O(nodes returned), for storing each node once."""
        return self._noisy[first:]

    def released(self, first: int) -> tuple[Int64Array, Int64Array]:
        """The releases of periods ``first..periods_closed`` of this epoch, recomputed from
        the stored noisy nodes: ``(noisy counts, noisy totals)``, each ``(n, width)``, equal to
        what :meth:`close_period` returned (carry included in the totals). O(closed x width)."""
        closed = self._closed
        if not 1 <= first <= closed + 1:
            raise HorizonError(f"first period must be in 1..{closed + 1}, got {first}")
        values = self.noisy_nodes()[1].astype(np.float64)
        # node values are integers below 2^53, so their float path sums are exact
        sums = np.rint(self.strategy.layout.path_sums(values)).astype(np.int64)
        totals = np.vstack([np.zeros((1, self.width), dtype=np.int64), sums])[first - 1 :]
        return np.diff(totals, axis=0), totals[1:] + self.carry

    def next_epoch(self) -> ContinualCounter:
        """A fresh tree for the next epoch whose totals carry this epoch's noisy total.

        Normally called after all ``horizon`` periods are closed; rolling earlier ends this epoch
        early (its unused periods are never released). Under event-level DP the epochs hold
        disjoint events, so the unbounded release stays epsilon-DP per event.
        """
        return ContinualCounter(
            self.strategy,
            self.epsilon,
            self.sensitivity,
            self.width,
            self.sampler,
            epoch=self.epoch + 1,
            carry=self._last_total + self.carry,
            carry_variance=self.total_variance(self._closed) + self.carry_variance,
            noise_label=self.noise_label,
            gaussian=self.gaussian,
        )

    # ------------------------------------------------------------------ persistence
    def epoch_noise(self) -> Int64Array | None:
        """None: this counter draws each node's noise when its period closes, so no noise is
        held ahead of use (see :meth:`streamdp.continual.bank.CounterBank.epoch_noise`)."""
        return None

    def adopt_noise(self, node_noise: Any) -> None:  # noqa: ARG002 - the bank interface
        """Refused: this counter holds no epoch noise (its stored nodes are adopted one by one
        through ``close_period(stored=...)``)."""
        raise StateError(
            f"a {self.strategy.mechanism} counter draws each node when its period closes and "
            "holds no epoch noise to adopt; pass stored nodes to close_period(stored=...)"
        )

    def state(
        self,
        *,
        with_noise: bool = True,  # noqa: ARG002 - the bank interface
        with_nodes: bool = True,
    ) -> dict[str, Any]:
        """Plain, JSON-serialisable state (ints, floats, strings, lists).

        Holds raw partial sums of pending nodes: protect it like the input data.
        ``with_noise`` is accepted for the bank interface; there is no epoch noise to leave out.
        ``with_nodes=False`` leaves out ``noisy_nodes`` (the daemon stores each node once, from
        :meth:`nodes_from`, and puts them back before :meth:`from_state`), so the state's size
        and cost do not grow with the periods closed.
        """
        return continual_state(self, with_nodes=with_nodes)

    @classmethod
    def from_state(cls, state: dict[str, Any], sampler: NoiseSampler) -> ContinualCounter:
        """Restore a counter from :meth:`state` without drawing any noise.

        Raises :class:`StateError` if the state is malformed, of another version, inconsistent
        (wrong node set or shapes), or was made with a sampler of different security.
        """
        return restore_continual(cls, state, sampler)
