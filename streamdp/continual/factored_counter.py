"""A bank of counters for the k-ary strategies: all node noise drawn at the epoch's start.

Same interface as :class:`streamdp.continual.counter.ContinualCounter` (``close_period``,
``state``/``from_state``, ``next_epoch``, ``total_variance``, ``count_variance``,
``noisy_nodes``). Differences, all from DESIGN §3 "Beyond FDA":

- At the epoch's first period close (or :meth:`FactoredCounter.draw_noise`) the noise ``z_i``
  of EVERY node of the epoch is drawn, one sampler call per tree level (``size = blocks x
  width``, label ``<label>|e<epoch>|L<l>``), and held in the state (:meth:`epoch_noise`); it
  must be stored before any release that used it is published.
  :meth:`FactoredCounter.from_state` reuses it and never draws it again; noise stored by a
  step a crash lost is given back with :meth:`adopt_noise` before it would be drawn.
- Release ``t`` is ``s_t + n_t`` with ``s_t`` the exact running total and ``n = M z`` the
  strategy's decoded noise (:meth:`streamdp.continual.kary.KaryStrategy.decode_noise`),
  computed once per epoch in O(nodes) and read in O(1) per release. ``kary_digits`` releases
  integers; ``kary_gls`` releases real numbers (float64): rounding them would change the exact
  variances the releases declare.
- ``noisy_nodes()`` returns the finalised blocks (every block whose last period has closed):
  their exact sum plus their stored noise, the vector every release is post-processing of,
  in the order they were finalised (the state names them ``noisy_nodes`` like the Fenwick
  counter's, so the daemon stores each one once under its own key).
- ``projection`` (a symmetric idempotent ``width x width`` matrix ``P``, optional): the
  decoded noise of every period is ``P n_t``. When the exact counts always satisfy the public
  constraints ``P`` projects onto (``P s = s``), release ``t = s_t + P n_t = P (s_t + n_t)``
  is consistent at publication, still post-processing of the noisy nodes, and counter ``j``'s
  variance is ``P_jj`` times the unprojected one (:attr:`FactoredCounter.variance_factors`).

State size per counter: ``nodes`` noise integers, about ``N k / (k - 1)`` (``N = 4095, k = 11``:
4,506), plus as many finalised noisy node values by the end of the epoch, plus ``L`` raw block
starts. At 8 bytes per value that is about ``16 N k / (k - 1)`` bytes per counter: 72 KB at
``N = 4095``, 18 MB at ``N = 10^6`` (plus ``8 N`` bytes of decoded noise in memory). It stops
being sensible around ``N = 10^6`` per counter for a JSON snapshot (tens of MB per counter):
use a daily horizon of years, not seconds, or Fenwick FDA, whose state grows one node per period.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter import check_bank, int_vector
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_config import exact_scale
from streamdp.continual.variance import (
    MAX_NOISE_SCALE,
    MIN_NOISE_SCALE,
    Epsilon,
    check_privacy,
    exact_epsilon,
)
from streamdp.errors import ConfigError, HorizonError, StateError
from streamdp.noise.sampler import NoiseSampler, discrete_laplace_variance

STATE_VERSION = 1
STATE_KIND = "streamdp.factored-counter"

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FactoredRelease:
    """One period close of a :class:`FactoredCounter`; fields as
    :class:`streamdp.continual.counter.PeriodRelease` (arrays ``(width,)``, float64 for GLS,
    integer-valued for negative digits; standard deviations exact, discrete Laplace)."""

    epoch: int
    period: int
    noisy_count: FloatArray
    noisy_total: FloatArray
    count_std: float
    total_std: float


def level_scales(strategy: KaryStrategy, epsilon: Epsilon, sensitivity: float) -> list[float]:
    """Noise scale of each level, ``Delta / (epsilon * budget_l)`` rounded up so the loss is at
    most ``epsilon * budget_l`` exactly, against epsilon as written (``0.1`` = 1/10).

    Raises :class:`ConfigError` when a scale leaves ``[2^-40, 2^40]`` (see
    :data:`streamdp.continual.variance.MAX_NOISE_SCALE`).
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
    ) -> None:
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
        self._scales = level_scales(strategy, epsilon, self.sensitivity)
        level_var = np.array([discrete_laplace_variance(b) for b in self._scales])
        self._node_var: FloatArray = level_var[strategy.node_levels]
        self._projection: FloatArray | None = None
        if projection is not None:
            matrix = np.asarray(projection, dtype=np.float64)
            if matrix.shape != (self.width, self.width):
                raise ConfigError(
                    f"projection must have shape ({self.width}, {self.width}), got {matrix.shape}"
                )
            self._projection = matrix
        self._z: Int64Array | None = None
        self._noise: FloatArray = np.zeros((0, self.width))
        if node_noise is not None:
            self.adopt_noise(node_noise)
        self._total_var = strategy.total_variances(self._node_var)
        self._count_var = strategy.count_variances(self._node_var)
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
        return self.strategy.mechanism == "kary_digits" and self._projection is None

    @property
    def variance_factors(self) -> FloatArray:
        """Per counter, the factor ``P_jj`` of its noise variance (ones without projection)."""
        if self._projection is None:
            return np.ones(self.width)
        return np.clip(np.diag(self._projection), 0.0, 1.0)

    def epoch_noise(self) -> Int64Array | None:
        """Every node's noise of this epoch, shape ``(nodes, width)``, once drawn (else None).
        Read only; store it before publishing anything released after it was drawn."""
        return self._z

    def adopt_noise(self, node_noise: npt.ArrayLike) -> None:
        """Use stored node noise of this epoch instead of drawing it (a restore, or a crash
        that lost the step after the noise was stored). :class:`StateError` if this epoch's
        noise was already drawn or ``node_noise`` has the wrong shape or type."""
        if self._z is not None:
            raise StateError(
                f"epoch {self.epoch} of {self.noise_label or 'this counter'} already has its "
                "node noise; stored noise can only be adopted before it is drawn"
            )
        z = np.asarray(node_noise)
        if z.shape != (self.strategy.node_count, self.width) or z.dtype.kind not in "iu":
            raise StateError(
                f"node noise must be integers of shape ({self.strategy.node_count}, "
                f"{self.width}), got {z.dtype} {z.shape}"
            )
        self._set_noise(z.astype(np.int64))

    def draw_noise(self) -> Int64Array:
        """This epoch's node noise, drawn now if it was not drawn (or adopted) yet."""
        if self._z is None:
            self._set_noise(self._draw_all())
        assert self._z is not None
        return self._z

    def _set_noise(self, z: Int64Array) -> None:
        noise = self.strategy.decode_noise(z.astype(np.float64), self._node_var)
        if self._projection is not None:
            noise = noise @ self._projection  # P symmetric: each row n_t becomes P n_t
        self._z, self._noise = z, noise

    def _draw_all(self) -> Int64Array:
        """Every node's noise, one call per level; the whole epoch's draw happens here."""
        parts = []
        for level, blocks in enumerate(self.strategy.blocks):
            scale = self._scales[level]
            size = blocks * self.width
            if self.noise_label:
                label = f"{self.noise_label}|e{self.epoch}|L{level}"
                noise = np.asarray(self.sampler.discrete_laplace(scale, size, label=label))
            else:
                noise = np.asarray(self.sampler.discrete_laplace(scale, size))
            if noise.shape != (size,):
                raise StateError(
                    f"sampler {self.sampler.name!r} returned shape {noise.shape}, expected "
                    f"({size},)"
                )
            parts.append(noise.astype(np.int64).reshape(blocks, self.width))
        return np.concatenate(parts)

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

    def range_variance(self, first: int, last: int) -> float:
        """Exact variance of the released sum over periods ``first..last`` of this epoch."""
        return self.strategy.range_variance(first, last, self._node_var)

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
        ends = self._blocks_ending(t)
        for level, node in ends:
            if node is not None:
                if level == 0:
                    self._period_rows.append(len(self._final))
                self._final.append(total - self._block_start[level] + z[node])
                self._final_ids.append(node + 1)
            self._block_start[level] = total
        self._exact_total = total
        self._closed = t
        noisy_total = total + self._noise[t - 1]
        before = self._exact_total - a + self._noise[t - 2] if t > 1 else np.zeros(self.width)
        return FactoredRelease(
            epoch=self.epoch,
            period=t,
            noisy_count=noisy_total - before,
            noisy_total=noisy_total + self.carry,
            count_std=math.sqrt(self.count_variance(t)),
            total_std=math.sqrt(self.total_variance(t) + self.carry_variance),
        )

    def _blocks_ending(self, t: int) -> list[tuple[int, int | None]]:
        """``(level, 0-based node or None)`` of every block ending at period ``t``, in
        finalising order: levels 0, 1, .. while ``k^l`` divides ``t`` (amortised ``k/(k-1)``
        blocks per period), every level at the horizon; None for a level's block past its
        last node (negative digits keep no block there)."""
        out: list[tuple[int, int | None]] = []
        last = t == self.horizon
        size = 1
        for level, offset in enumerate(self.strategy.level_offsets):
            if t % size and not last:
                break
            block = (t - 1) // size
            out.append((level, offset + block if block < self.strategy.blocks[level] else None))
            size *= self.strategy.branching
        return out

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
        noise = self._noise[max(first - 2, 0) : closed]
        if first == 1:
            noise = np.vstack([np.zeros((1, self.width)), noise])
        totals: FloatArray = exact + noise
        return np.diff(totals, axis=0), totals[1:] + self.carry

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
        return ids, values, self._node_var[ids - 1].copy()

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
        last = (
            self._exact_total + self._noise[self._closed - 1]
            if self._closed
            else np.zeros(self.width)
        )
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
            projection=self._projection,
        )

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
        s = self.strategy
        out = {
            "kind": STATE_KIND,
            "version": STATE_VERSION,
            "mechanism": s.mechanism,
            "objective": s.objective,
            "horizon": s.horizon,
            "branching": s.branching,
            "budgets": list(s.budgets),
            "epsilon": self.epsilon,
            "sensitivity": self.sensitivity,
            "width": self.width,
            "epoch": self.epoch,
            "sampler": {"name": self.sampler.name, "secure": bool(self.sampler.secure)},
            "noise_label": self.noise_label,
            "periods_closed": self._closed,
            "carry": self.carry.tolist(),
            "carry_variance": self.carry_variance,
            "noise_drawn": self._z is not None,
            "node_noise": self._z.tolist() if with_noise and self._z is not None else None,
            "exact_total": self._exact_total.tolist(),
            "block_start": self._block_start.tolist(),
        }
        if with_nodes:
            out["noisy_nodes"] = [v.tolist() for v in self._final]
        return out

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
        try:
            if state.get("kind") != STATE_KIND or state.get("version") != STATE_VERSION:
                raise StateError(
                    f"not a factored-counter state of version {STATE_VERSION} "
                    f"(kind={state.get('kind')!r}, version={state.get('version')!r})"
                )
            recorded = state["sampler"]
            if bool(recorded["secure"]) != bool(sampler.secure):
                raise StateError(
                    f"state was produced with sampler {recorded['name']!r} "
                    f"(secure={recorded['secure']}); restoring with {sampler.name!r} "
                    f"(secure={sampler.secure}) is refused: use a sampler of the same kind"
                )
            strategy = KaryStrategy(
                mechanism=state["mechanism"],
                objective=state["objective"],
                horizon=int(state["horizon"]),
                branching=int(state["branching"]),
                budgets=tuple(float(b) for b in state["budgets"]),
            )
            counter = cls(
                strategy,
                state["epsilon"],
                state["sensitivity"],
                state["width"],
                sampler,
                epoch=state["epoch"],
                carry=np.asarray(state["carry"], dtype=np.float64),
                carry_variance=state["carry_variance"],
                noise_label=state.get("noise_label", ""),
                projection=projection,
            )
            noise = state.get("node_noise")
            if noise is not None:
                counter.adopt_noise(np.asarray(noise, dtype=np.int64))
            elif state["noise_drawn"] or state["periods_closed"]:
                raise StateError(
                    f"epoch {counter.epoch}'s node noise is missing from the state; refusing to "
                    "restore (drawn noise is never drawn again): restore its stored noise"
                )
            closed = state["periods_closed"]
            if not isinstance(closed, int) or not 0 <= closed <= strategy.horizon:
                raise StateError(f"periods_closed must be in 0..{strategy.horizon}, got {closed!r}")
            values = [int_vector(v, counter.width, "noisy node") for v in state["noisy_nodes"]]
            ids: list[int] = []
            rows: list[int] = []
            for t in range(1, closed + 1):
                for level, node in counter._blocks_ending(t):
                    if node is not None:
                        if level == 0:
                            rows.append(len(ids))
                        ids.append(node + 1)
            if len(values) != len(ids):
                raise StateError(
                    f"state holds {len(values)} finalised nodes; {closed} closed periods "
                    f"finalise {len(ids)}"
                )
            counter._exact_total = int_vector(state["exact_total"], counter.width, "total")
            starts = np.asarray(state["block_start"], dtype=np.int64)
            if starts.shape != (strategy.levels, counter.width):
                raise StateError(f"block_start must have shape ({strategy.levels}, width)")
            counter._block_start = starts
        except StateError:
            raise
        except (KeyError, TypeError, ValueError, ConfigError) as error:
            raise StateError(f"factored-counter state is malformed: {error}") from error
        counter._closed = closed
        counter._final_ids = ids
        counter._final = values
        counter._period_rows = rows
        return counter
