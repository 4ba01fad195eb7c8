"""A bank of BLT counters under rho-zCDP (issue 27): the buffered-linear-Toeplitz factorization
on a lattice (:mod:`streamdp.continual.lattice_blt`), O(buffers) state per counter whatever
the horizon.

Per period close: the exact counts enter the integer encoding ``F`` (``d`` raw-data buffers per
counter, protected state), the discrete Gaussian ``z_t`` on the same lattice is drawn once, and
the noisy values ``y_t = F_t + z_t`` (integers, units of ``2^-G``) are stored before anything
is released from them. Releases are decoded from ``y`` alone (``d`` float buffers and the running
total per counter), projected onto the stream's constraint span when it is one where the exact
counts always lie (as the k-ary mechanisms are), and carry earlier epochs' final totals.

Same interface as :class:`streamdp.continual.counter.ContinualCounter`
(:class:`streamdp.continual.bank.CounterBank`); its state kind is
``streamdp.blt-counter`` (:meth:`BltCounter.state`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank_state import bank_state, check_state_header, periods_closed
from streamdp.continual.blt_factorization import optimise_blt
from streamdp.continual.counter_checks import check_bank, int_vector
from streamdp.continual.factored_noise import project_rows
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.lattice_blt import GRID_BITS, LatticeBLT, counters_touched, lattice_sigma
from streamdp.continual.matrix_factorization import series_inverse
from streamdp.continual.privacy import check_privacy
from streamdp.continual.releases import FactoredRelease
from streamdp.errors import ConfigError, HorizonError, StateError
from streamdp.noise.gaussian import gaussian_sampler
from streamdp.noise.sampler import NoiseSampler

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

STATE_KIND = "streamdp.blt-counter"
STATE_VERSION = 1
BLT_OBJECTIVES = ("total", "minimax")
_INT64_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class BltStrategy:
    """The ``blt`` mechanism for a horizon: the lattice BLT optimised for ``objective``
    (``total``: mean running-total variance; ``minimax``: the worst) with ``buffers`` buffers.
    One noisy value per counter per period (``node_count = horizon``)."""

    objective: str
    horizon: int
    buffers: int
    lattice: LatticeBLT
    mechanism: str = "blt"

    @property
    def node_count(self) -> int:
        return self.horizon

    @property
    def state_values_per_counter(self) -> int:
        """What a counter holds between closes: ``d`` encoding and ``d`` decoding buffers and
        its running total (the noisy values are stored once each, like a tree's nodes)."""
        return 2 * self.buffers + 1

    @cached_property
    def b_coefficients(self) -> FloatArray:
        return self.lattice.b_coefficients(self.horizon)

    @cached_property
    def count_weights(self) -> FloatArray:
        """First column of ``C^{-1}``: a period count's noise weights (differences of ``B``)."""
        return series_inverse(self.lattice.coefficients(self.horizon))


@lru_cache(maxsize=32)
def blt_strategy(horizon: int, objective: str = "total", buffers: int = 3) -> BltStrategy:
    """The optimised lattice BLT for ``horizon`` (cached: the optimisation takes ~1 s at
    N = 4095)."""
    if objective not in BLT_OBJECTIVES:
        raise ConfigError(f"blt takes objective total or minimax, got {objective!r}")
    parameters = optimise_blt(horizon, buffers, "mean" if objective == "total" else "max")
    return BltStrategy(objective, horizon, buffers, LatticeBLT.from_parameters(parameters))


class BltCounter:
    """A bank of ``width`` BLT counters sharing one strategy and one noise scale."""

    integral_releases = False

    def __init__(
        self,
        strategy: BltStrategy,
        epsilon: float,
        sensitivity: float,
        width: int,
        sampler: NoiseSampler,
        *,
        gaussian: GaussianBudget,
        epoch: int = 0,
        carry: npt.ArrayLike | None = None,
        carry_variance: float = 0.0,
        carry_rounding: float = 0.0,
        noise_label: str = "",
        projection: FloatArray | None = None,
    ) -> None:
        # ``epsilon`` is the (epsilon, delta) bound of the zCDP budget, reported only
        self.epsilon, self.sensitivity = check_privacy(epsilon, sensitivity)
        check_bank(width, epoch, carry_variance)
        self.strategy = strategy
        self.gaussian = gaussian
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
        self.carry_rounding = float(carry_rounding)
        self.projection = projection
        touched = counters_touched(self.sensitivity, self.width)
        self.sigma = lattice_sigma(
            strategy.lattice, strategy.horizon, gaussian.rho, gaussian.l2_squared, touched
        )
        self._total_var = strategy.lattice.release_variances(strategy.horizon, self.sigma)
        unit = self.sigma * 2.0**-GRID_BITS
        d = strategy.count_weights
        self._count_var = unit * unit * np.cumsum(d * d)
        rounding = strategy.lattice.rounding_bounds(strategy.horizon)
        # a projection mixes the counters' biases: |(P r)_j| <= sqrt(width) max |r|
        self._rounding = rounding * (math.sqrt(self.width) if projection is not None else 1.0)
        self._closed = 0
        buffers = strategy.lattice.buffers
        self._encode: list[list[int]] = [[0] * self.width for _ in range(buffers)]
        self._decode: list[list[float]] = [[0.0] * self.width for _ in range(buffers)]
        self._total: list[float] = [0.0] * self.width  # this epoch's decoded total
        self._noisy: list[Int64Array] = []  # y_t, t = 1..closed

    # ------------------------------------------------------------------ views
    @property
    def horizon(self) -> int:
        return self.strategy.horizon

    @property
    def periods_closed(self) -> int:
        return self._closed

    @property
    def node_count(self) -> int:
        return len(self._noisy)

    def total_variance(self, t: int) -> float:
        """``Var`` of this epoch's released running total ``t`` (carry excluded; 0 at t = 0)."""
        return 0.0 if t == 0 else float(self._total_var[t - 1])

    def count_variance(self, t: int) -> float:
        return 0.0 if t == 0 else float(self._count_var[t - 1])

    def total_std(self, t: int) -> float:
        """``sqrt(Var)`` plus the bound on the lattice's rounding bias of this epoch's total
        and the carried ones (an upper bound on the RMS error), before a projection's
        ``sqrt(P_jj)``."""
        variance = self.total_variance(t) + self.carry_variance
        bias = (float(self._rounding[t - 1]) if t else 0.0) + self.carry_rounding
        return math.sqrt(variance) + bias

    def count_std(self, t: int) -> float:
        bias = float(self._rounding[t - 1]) + (float(self._rounding[t - 2]) if t > 1 else 0.0)
        return math.sqrt(self.count_variance(t)) + bias

    # ------------------------------------------------------------------ releasing
    def close_period(
        self, counts: npt.NDArray[np.int64], *, stored: Any | None = None
    ) -> FactoredRelease:
        """Close the next period with its true ``counts``: encode, draw ``z_t`` (or use the
        ``stored`` noisy values of a step a crash lost), store ``y_t``, then release. The
        counter is unchanged if anything raises."""
        t = self._closed + 1
        if t > self.horizon:
            raise HorizonError(
                f"epoch {self.epoch} already released all {self.horizon} periods of its horizon; "
                "call next_epoch() to start a new epoch"
            )
        a = int_vector(counts, self.width, "counts")
        lattice = self.strategy.lattice
        encoded, encode_after = lattice.encode_step(self._encode, a.tolist())
        if stored is not None:
            noisy = int_vector(stored, self.width, "stored noisy value").tolist()
        else:
            label = f"{self.noise_label}|e{self.epoch}|n{t}" if self.noise_label else ""
            z = gaussian_sampler(self.sampler).discrete_gaussian(
                self.sigma, self.width, label=label
            )
            noisy = [f + int(e) for f, e in zip(encoded, z.tolist(), strict=True)]
        if any(abs(v) > _INT64_LIMIT for v in noisy):
            raise StateError("a BLT noisy value left the int64 range; the counts are too large")
        previous = self._released_totals()
        released, decode_after = lattice.decode_step(self._decode, self._total, noisy)
        # commit: the noisy value is stored before anything derived from it is returned
        self._noisy.append(np.asarray(noisy, dtype=np.int64))
        self._encode, self._decode, self._total = encode_after, decode_after, released
        self._closed = t
        current = self._released_totals()
        return FactoredRelease(
            epoch=self.epoch,
            period=t,
            noisy_count=current - previous,
            noisy_total=current + self.carry,
            count_std=self.count_std(t),
            total_std=self.total_std(t),
        )

    def _released_totals(self) -> FloatArray:
        """This epoch's decoded total (carry excluded), projected when the stream is."""
        values = np.asarray([self._total], dtype=np.float64)
        if self.projection is not None:
            values = project_rows(values, self.projection)
        out: FloatArray = values[0]
        return out

    def released(self, first: int) -> tuple[FloatArray, FloatArray]:
        """Periods ``first..closed`` of this epoch decoded again from the stored noisy values
        (the same float operations in the same order: equal to what :meth:`close_period`
        returned): ``(noisy counts, noisy totals)``, each ``(n, width)``, carry included."""
        if not 1 <= first <= self._closed + 1:
            raise HorizonError(f"first period must be in 1..{self._closed + 1}, got {first}")
        lattice = self.strategy.lattice
        decode = [[0.0] * self.width for _ in range(lattice.buffers)]
        total = [0.0] * self.width
        rows = [list(total)]
        for noisy in self._noisy:
            total, decode = lattice.decode_step(decode, total, noisy.tolist())
            rows.append(total)
        values = np.asarray(rows, dtype=np.float64)
        if self.projection is not None:
            values = project_rows(values, self.projection)
        totals = values[first - 1 :]
        return np.diff(totals, axis=0), totals[1:] + self.carry

    def next_epoch(self) -> BltCounter:
        """A fresh epoch whose totals carry this epoch's last released total."""
        return BltCounter(
            self.strategy,
            self.epsilon,
            self.sensitivity,
            self.width,
            self.sampler,
            gaussian=self.gaussian,
            epoch=self.epoch + 1,
            carry=self._released_totals() + self.carry,
            carry_variance=self.total_variance(self._closed) + self.carry_variance,
            carry_rounding=(float(self._rounding[self._closed - 1]) if self._closed else 0.0)
            + self.carry_rounding,
            noise_label=self.noise_label,
            projection=self.projection,
        )

    # ------------------------------------------------------------------ nodes and noise
    def noisy_nodes(self) -> tuple[Int64Array, Int64Array, FloatArray]:
        """The stored noisy values of this epoch: ``(1..n, values (n, width), variance of each
        value's noise in units^2 (n,))``."""
        n = self._closed
        values = np.stack(self._noisy) if n else np.zeros((0, self.width), dtype=np.int64)
        return np.arange(1, n + 1, dtype=np.int64), values, np.full(n, self.sigma**2)

    def nodes_from(self, first: int) -> list[Int64Array]:
        return self._noisy[first:]

    def epoch_noise(self) -> Int64Array | None:
        """None: each period's noise is drawn at its close and stored as its noisy value."""
        return None

    def adopt_noise(self, node_noise: Any) -> None:  # noqa: ARG002 - the bank interface
        raise StateError(
            "a blt counter draws each period's noise when it closes; pass stored noisy values "
            "to close_period(stored=...)"
        )

    # ------------------------------------------------------------------ persistence
    def state(
        self,
        *,
        with_noise: bool = True,  # noqa: ARG002 - the bank interface
        with_nodes: bool = True,
    ) -> dict[str, Any]:
        """Plain JSON-able state. ``encode`` holds raw-data buffers: protect it like the
        input. ``with_nodes=False`` leaves out the noisy values (stored once each by the
        daemon and put back before :meth:`from_state`)."""
        out: dict[str, Any] = {
            "kind": STATE_KIND,
            "version": STATE_VERSION,
            "objective": self.strategy.objective,
            "horizon": self.horizon,
            "buffers": self.strategy.buffers,
            "lattice": {"m": list(self.strategy.lattice.m), "n": list(self.strategy.lattice.n)},
            **bank_state(self),
            "gaussian": self.gaussian.to_dict(),
            "carry_rounding": self.carry_rounding,
            "encode": self._encode,
            "decode": self._decode,
            "total": self._total,
        }
        if with_nodes:
            out["noisy_nodes"] = [v.tolist() for v in self._noisy]
        return out

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        sampler: NoiseSampler,
        *,
        projection: FloatArray | None = None,
    ) -> BltCounter:
        """Restore without drawing; :class:`StateError` if malformed or of another kind."""
        try:
            check_state_header(state, STATE_KIND, STATE_VERSION, "blt-counter", sampler)
            lattice = LatticeBLT(
                tuple(int(m) for m in state["lattice"]["m"]),
                tuple(int(n) for n in state["lattice"]["n"]),
            )
            strategy = BltStrategy(
                str(state["objective"]), int(state["horizon"]), int(state["buffers"]), lattice
            )
            counter = cls(
                strategy,
                state["epsilon"],
                state["sensitivity"],
                state["width"],
                sampler,
                gaussian=GaussianBudget.from_dict(state["gaussian"]),
                epoch=state["epoch"],
                carry=np.asarray(state["carry"], dtype=np.float64),
                carry_variance=state["carry_variance"],
                carry_rounding=float(state["carry_rounding"]),
                noise_label=state.get("noise_label", ""),
                projection=projection,
            )
            closed = periods_closed(state, strategy.horizon)
            noisy = [int_vector(v, counter.width, "noisy value") for v in state["noisy_nodes"]]
            if len(noisy) != closed:
                raise StateError(f"state holds {len(noisy)} noisy values but {closed} periods")
            counter._encode = [[int(v) for v in row] for row in state["encode"]]
            counter._decode = [[float(v) for v in row] for row in state["decode"]]
            counter._total = [float(v) for v in state["total"]]
            shapes = {len(row) for row in counter._encode + counter._decode}
            if (
                len(counter._encode) != lattice.buffers
                or len(counter._decode) != lattice.buffers
                or shapes - {counter.width}
                or len(counter._total) != counter.width
            ):
                raise StateError("blt counter buffers do not match its width and buffers")
            counter._noisy = noisy
            counter._closed = closed
        except StateError:
            raise
        except (KeyError, TypeError, ValueError, ConfigError) as error:
            raise StateError(f"blt counter state is malformed: {error}") from None
        return counter
