"""A bank of counters for the k-ary strategies: all node noise drawn at the epoch's start.

Same interface as :class:`streamdp.continual.counter.ContinualCounter` (``close_period``,
``state``/``from_state``, ``next_epoch``, ``total_variance``, ``count_variance``,
``noisy_nodes``). Differences, all from DESIGN §3 "Beyond FDA":

- At the epoch's first period close (or :meth:`FactoredCounter.draw_noise`) the noise ``z_i``
  of EVERY node of the epoch is drawn, one sampler call per tree level, and held in the state
  (:meth:`epoch_noise`); it must be stored before any release that used it is published.
  :meth:`FactoredCounter.from_state` reuses it and never draws it again; noise stored by a
  step a crash lost is given back with :meth:`adopt_noise` before it would be drawn.
- Release ``t`` is ``D(y)_t``, the strategy's fixed-point decoding of the noisy nodes
  ``y = R a + z`` (:mod:`streamdp.continual.fixed_point`), computed exactly as the int64 sum
  ``s_t + D(z)_t`` (shift-equivariance makes the two equal) and only then turned into float64:
  every release is a deterministic function of the noisy nodes alone, whatever the split of
  ``y`` into count and noise (DESIGN §2). With a projection ``P``
  (:attr:`FactoredCounter.variance_factors`) the float totals are projected next, in a fixed
  order (:func:`~streamdp.continual.factored_noise.project_rows`). ``kary_digits`` releases
  integers; ``kary_gls`` releases multiples of ``2^-32`` (as float64) within
  :meth:`~streamdp.continual.kary.KaryStrategy.rounding_bound` of the exact GLS estimate, a
  bound the declared standard deviations include (:meth:`FactoredCounter.total_std`).
- ``noisy_nodes()`` returns the finalised blocks (every block whose last period has closed):
  their exact sum plus their stored noise, the vector every release is post-processing of,
  in the order they were finalised (the state names them ``noisy_nodes`` like the Fenwick
  counter's, so the daemon stores each one once under its own key).

The epoch's noise (level scales, the draw, decoding) is in
:mod:`streamdp.continual.factored_noise`, which blocks a close finalises in
:mod:`streamdp.continual.factored_blocks`, the state and its restore (and the state's size) in
:mod:`streamdp.continual.factored_state`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter_checks import check_bank, int_vector
from streamdp.continual.factored_blocks import blocks_ending
from streamdp.continual.factored_noise import EpochNoise, project_rows
from streamdp.continual.factored_state import factored_state, restore_factored
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.privacy import check_privacy
from streamdp.continual.releases import FactoredRelease
from streamdp.errors import ConfigError, HorizonError, StateError
from streamdp.noise.sampler import NoiseSampler

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class FactoredCounter:
    """A bank of ``width`` counters sharing one k-ary strategy; noise drawn at epoch start."""

    def __init__(
        self,
        strategy: KaryStrategy,
        epsilon: float,
        sensitivity: float,
        width: int,
        sampler: NoiseSampler,
        *,
        epoch: int = 0,
        carry: npt.ArrayLike | None = None,
        carry_variance: float = 0.0,
        noise_label: str = "",
        node_noise: Int64Array | None = None,
        projection: FloatArray | None = None,
        gaussian: GaussianBudget | None = None,
    ) -> None:
        # under zCDP (``gaussian``) ``epsilon`` is the (epsilon, delta) bound, reported only
        self.epsilon, self.sensitivity = check_privacy(epsilon, sensitivity)
        check_bank(width, epoch, carry_variance)
        self.strategy = strategy
        self.width = int(width)
        self.sampler = sampler
        self.noise_label = str(noise_label)
        self.epoch = int(epoch)
        self.carry: FloatArray = (
            np.zeros(self.width) if carry is None else np.asarray(carry, dtype=np.float64)
        )
        if self.carry.shape != (self.width,):
            raise ConfigError(f"carry must have shape ({self.width},), got {self.carry.shape}")
        self.carry_variance = float(carry_variance)
        self.gaussian = gaussian
        self._noise = EpochNoise(
            strategy, epsilon, self.sensitivity, self.width, projection, gaussian=gaussian
        )
        if node_noise is not None:
            self.adopt_noise(node_noise)
        self._total_var = strategy.total_variances(self._noise.node_var)
        self._count_var = strategy.count_variances(self._noise.node_var)
        # public bound on one running total's fixed-point rounding; a projection mixes the
        # counters' roundings: |(P r)_j| <= sqrt(P_jj) ||r||_2 <= sqrt(P_jj width) max|r|
        bound = strategy.rounding_bound()
        self._rounding = bound * (math.sqrt(self.width) if projection is not None else 1.0)
        self._closed = 0
        self._exact_total: Int64Array = np.zeros(self.width, dtype=np.int64)  # raw s_t
        # raw running total at the start of each level's open block
        self._block_start: Int64Array = np.zeros((strategy.levels, self.width), dtype=np.int64)
        self._final: list[Int64Array] = []  # noisy values of finalised nodes, in finalising order
        self._final_ids: list[int] = []  # their 1-based node ids
        self._period_rows: list[int] = []  # index in _final of period t's level-0 block, t - 1

    # ------------------------------------------------------------------ noise
    @property
    def integral_releases(self) -> bool:
        """True when releases are integers (negative digits without a projection)."""
        return self.strategy.mechanism == "kary_digits" and self._noise.projection is None

    @property
    def variance_factors(self) -> FloatArray:
        """Per counter, the factor ``P_jj`` of its noise variance (ones without projection)."""
        if self._noise.projection is None:
            return np.ones(self.width)
        return np.clip(np.diag(self._noise.projection), 0.0, 1.0)

    def epoch_noise(self) -> Int64Array | None:
        """Every node's noise of this epoch, shape ``(nodes, width)``, once drawn (else None).
        Read only; store it before publishing anything released after it was drawn."""
        return self._noise.nodes

    def adopt_noise(self, node_noise: npt.ArrayLike) -> None:
        """Use stored node noise of this epoch instead of drawing it (a restore, or a crash
        that lost the step after the noise was stored). :class:`StateError` if this epoch's
        noise was already drawn or ``node_noise`` has the wrong shape or type."""
        self._noise.adopt(node_noise, f"epoch {self.epoch} of {self.noise_label or 'this counter'}")

    def draw_noise(self) -> Int64Array:
        """This epoch's node noise, drawn now if it was not drawn (or adopted) yet."""
        return self._noise.draw(self.sampler, self.noise_label, self.epoch)

    # ------------------------------------------------------------------ views
    @property
    def horizon(self) -> int:
        """Periods per epoch."""
        return self.strategy.horizon

    @property
    def periods_closed(self) -> int:
        """Number of periods of this epoch already closed (0..horizon)."""
        return self._closed

    def total_variance(self, t: int) -> float:
        """Exact ``Var(s~_t)`` of this epoch (carry excluded); ``Var(s~_0) = 0``."""
        return 0.0 if t == 0 else float(self._total_var[t - 1])

    def count_variance(self, t: int) -> float:
        """Exact ``Var(s~_t - s~_{t-1})``."""
        return float(self._count_var[t - 1])

    def count_std(self, t: int) -> float:
        """Declared standard deviation of the released count of period ``t``: the exact one
        plus the fixed-point rounding of the two totals it is the difference of (see
        :meth:`total_std`)."""
        return _declared_std(self.count_variance(t), 2.0 * self._rounding)

    def total_std(self, t: int) -> float:
        """Declared standard deviation of the released running total ``t`` (carry included):
        ``sqrt(Var) + rho``, an upper bound on its root mean squared error, ``rho`` bounding
        the fixed-point rounding of this epoch's total and of each carried one (for
        ``kary_gls``; zero for integer releases). Before a projection's ``sqrt(P_jj)``."""
        variance = self.total_variance(t) + self.carry_variance
        return _declared_std(variance, (self.epoch + 1) * self._rounding)

    def range_variance(self, first: int, last: int) -> float:
        """Exact variance of the released sum over periods ``first..last`` of this epoch."""
        return self.strategy.range_variance(first, last, self._noise.node_var)

    # ------------------------------------------------------------------ releasing
    def close_period(
        self, counts: npt.NDArray[np.int64], *, stored: Any | None = None
    ) -> FactoredRelease:
        """Close the next period with its true counts (shape ``(width,)``) and release it.

        No noise is drawn here (it was drawn at the epoch's start). ``stored`` is accepted for
        interface compatibility with :class:`ContinualCounter` and must be None: this
        counter's noise is all in its state already. O(width) plus the blocks that end now
        (O(1) amortised).
        """
        if stored is not None:
            raise StateError(
                "a factored counter holds every node's noise from the epoch's start; restore "
                "it with from_state() instead of passing a stored node"
            )
        t = self._closed + 1
        if t > self.horizon:
            raise HorizonError(
                f"epoch {self.epoch} already released all {self.horizon} periods of its horizon; "
                "call next_epoch() to start a new epoch (its totals carry this epoch's noisy total)"
            )
        a = int_vector(counts, self.width, "counts")
        z = self.draw_noise()
        total = self._exact_total + a
        # finalise the blocks ending at t: levels 0, 1, .. while k^l divides t (amortised
        # k/(k-1) blocks per period), every level at the horizon
        ends = blocks_ending(self.strategy, t)
        for level, node in ends:
            if node is not None:
                if level == 0:
                    self._period_rows.append(len(self._final))
                self._final.append(total - self._block_start[level] + z[node])
                self._final_ids.append(node + 1)
            self._block_start[level] = total
        self._exact_total = total
        self._closed = t
        totals = self._released_totals(np.stack([total - a, total]), np.array([t - 1, t]))
        return FactoredRelease(
            epoch=self.epoch,
            period=t,
            noisy_count=totals[1] - totals[0],
            noisy_total=totals[1] + self.carry,
            count_std=self.count_std(t),
            total_std=self.total_std(t),
        )

    def _released_totals(self, exact: Int64Array, periods: Int64Array) -> FloatArray:
        """This epoch's released running totals (carry excluded) at the 1-based ``periods``
        (period 0: zeros) with exact totals ``exact`` (``(n, width)``): the noisy totals as
        floats (a function of the noisy nodes alone), then projected when the stream is."""
        self.draw_noise()
        values = self._noise.noisy_totals(exact, periods)
        if self._noise.projection is not None:
            values = project_rows(values, self._noise.projection)
        return values

    def released(self, first: int) -> tuple[FloatArray, FloatArray]:
        """The releases of periods ``first..periods_closed`` of this epoch, recomputed from
        the state, ``(noisy counts, noisy totals)`` each shape ``(n, width)``, equal to what
        :meth:`close_period` returned (carry included in the totals). O(n width): the exact
        totals are read back from the current one through the level-0 noisy nodes
        (``a_t = y_t - z_t``)."""
        closed = self._closed
        if not 1 <= first <= closed + 1:
            raise HorizonError(f"first period must be in 1..{closed + 1}, got {first}")
        n = closed - first + 1
        if n == 0:
            return np.zeros((0, self.width)), np.zeros((0, self.width))
        z = self.draw_noise()
        rows = self._period_rows[first - 1 :]
        values = np.stack([self._final[r] for r in rows])
        counts = values - z[first - 1 : closed]  # exact a_t (level-0 node t has id t)
        # s_t for t = first-1..closed: the current total minus the later counts
        later = np.cumsum(counts[::-1], axis=0)[::-1]
        exact = np.vstack([self._exact_total - later, self._exact_total[None, :]])
        totals = self._released_totals(exact, np.arange(first - 1, closed + 1))
        return totals[1:] - totals[:-1], totals[1:] + self.carry

    @property
    def node_count(self) -> int:
        """Number of finalised nodes of this epoch so far."""
        return len(self._final)

    def nodes_from(self, first: int) -> list[Int64Array]:
        """The finalised nodes' noisy values from 0-based position ``first`` on, in finalising
        order (read only): O(nodes returned), for storing each node once."""
        return self._final[first:]

    def noisy_nodes(self) -> tuple[Int64Array, Int64Array, FloatArray]:
        """Finalised nodes: ``(ids (n,), noisy values (n, width), noise variances (n,))``."""
        ids = np.asarray(self._final_ids, dtype=np.int64)
        values = np.stack(self._final) if self._final else np.zeros((0, self.width), dtype=np.int64)
        return ids, values, self._noise.node_var[ids - 1].copy()

    def noisy_totals(self) -> FloatArray:
        """This epoch's released running totals so far (carry excluded), ``(closed, width)``.

        Recomputed from the state, never stored twice: level-0 blocks are single periods, so
        ``a_t = y_t - z_t`` for the finalised noisy node ``y_t``; the totals are
        ``cumsum(a) + n``. What consistency revisions project (rows onto the constraint span:
        the exact totals already satisfy the constraints, so this projects the noise).
        """
        out: FloatArray = self.released(1)[1] - self.carry
        return out

    def next_epoch(self) -> FactoredCounter:
        """A fresh epoch (its noise drawn at its first close) whose totals carry this epoch's
        noisy total."""
        last = self._released_totals(self._exact_total[None, :], np.array([self._closed]))[0]
        return FactoredCounter(
            self.strategy,
            self.epsilon,
            self.sensitivity,
            self.width,
            self.sampler,
            epoch=self.epoch + 1,
            carry=last + self.carry,
            carry_variance=self.total_variance(self._closed) + self.carry_variance,
            noise_label=self.noise_label,
            projection=self._noise.projection,
            gaussian=self.gaussian,
        )

    @property
    def rounding_bound(self) -> float:
        """Public bound on the fixed-point rounding of one of this epoch's running totals
        (counts; zero for integer releases), after the projection."""
        return self._rounding

    # ------------------------------------------------------------------ persistence
    def state(self, *, with_noise: bool = True, with_nodes: bool = True) -> dict[str, Any]:
        """Plain, JSON-serialisable state, including every node's noise of the epoch once it
        is drawn (``node_noise``; None before, or when ``with_noise=False``: the daemon stores
        the noise once per epoch from :meth:`epoch_noise` and puts it back before
        :meth:`from_state`). ``noise_drawn`` says whether a restore needs it.
        ``with_nodes=False`` leaves out ``noisy_nodes`` (the daemon stores each finalised node
        once, from :meth:`nodes_from`, and puts them back before :meth:`from_state`).

        Holds raw running totals: protect it like the input data. The noise must be stored
        before any release that used it is published. The projection is not stored: it
        follows from the stream's public constraints and is given again to :meth:`from_state`.
        """
        return factored_state(self, with_noise=with_noise, with_nodes=with_nodes)

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        sampler: NoiseSampler,
        *,
        projection: FloatArray | None = None,
    ) -> FactoredCounter:
        """Restore without drawing; :class:`StateError` if malformed, of another sampler kind,
        or if noise that was drawn is missing (it is never drawn again)."""
        return restore_factored(cls, state, sampler, projection)


_FLOAT_PRODUCT_SLACK = 1.0 + 2.0**-40
"""Relative slack for the float products inside the fixed-point decoder (each correctly
rounded, a relative ``2^-53`` of a noise quantity; see :mod:`streamdp.continual.fixed_point`)."""


def _declared_std(variance: float, rounding: float) -> float:
    """``sqrt(variance) + rounding`` (Minkowski: an upper bound on the RMS error of a value
    whose error is the exact estimator's plus at most ``rounding``)."""
    if rounding == 0.0:
        return math.sqrt(variance)
    return math.sqrt(variance) * _FLOAT_PRODUCT_SLACK + rounding
