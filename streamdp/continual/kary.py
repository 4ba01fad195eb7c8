"""k-ary block-tree strategies for continual counting: one tree, two decoders.

Every level ``l = 0..L-1`` releases every block of ``k^l`` consecutive periods with budget
``epsilon * budgets[l]`` (``sum budgets <= 1``; an event touches one block per level, so the
release is ``epsilon``-DP per event). The epoch's node noise ``z`` is drawn at its start; release
``t`` is the exact running total plus a fixed linear image of ``z``: ``s~_t = s_t + n_t``,
``n = M z`` (DESIGN §3, "Beyond FDA"). :class:`DigitsStrategy` decodes by negative digits
(:mod:`~streamdp.continual.kary_digits`), :class:`GlsStrategy` by least squares over all blocks
(:mod:`~streamdp.continual.kary_gls`); :mod:`~streamdp.continual.kary_optimise` chooses them.

Node numbering: level-major, 1-based; level ``l`` block ``j`` (0-based) is node
``level_offset[l] + j + 1`` and covers periods ``j k^l + 1 .. (j + 1) k^l`` (clipped to the
horizon for GLS; digits may use a block that ends past the horizon, whose periods past ``N``
never occur). Units: variances in counts^2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.fixed_point import (
    IntLike,
    digits_fixed,
    gls_fixed_estimate,
    gls_rounding_bound,
    running_totals,
)
from streamdp.continual.kary_config import (
    FloatArray,
    IntArray,
    KaryMechanism,
    KaryObjective,
    check_branching,
    check_kary_mechanism,
    check_kary_objective,
)
from streamdp.continual.kary_digits import (
    DigitPaths,
    digit_levels,
    digit_paths,
    digits_count_variances,
    digits_covariance,
    digits_decode,
    digits_decode_integers,
    exclusive_cumsum,
)
from streamdp.continual.kary_gls import (
    gls_estimate,
    gls_levels,
    gls_solve,
    gls_tree_levels,
    gls_variances,
)
from streamdp.errors import ConfigError


@dataclass(frozen=True)
class KaryStrategy:
    """A k-ary block tree with per-level budgets; :class:`DigitsStrategy` and
    :class:`GlsStrategy` say how it is decoded.

    ``KaryStrategy(mechanism, ...)`` builds the subclass named by ``mechanism``.
    ``budgets[l]`` is level ``l``'s share of epsilon (exact rational sum <= 1). ``objective``
    records what the budgets and ``k`` were chosen for. Equality: all five fields.
    """

    mechanism: KaryMechanism
    objective: KaryObjective
    horizon: int
    branching: int
    budgets: tuple[float, ...]

    def __new__(cls, *args: Any, **kwargs: Any) -> KaryStrategy:
        kind = cls
        if cls is KaryStrategy:
            name = kwargs["mechanism"] if "mechanism" in kwargs else args[0]
            kind = KaryStrategy.kind(name)
        return object.__new__(kind)

    def __post_init__(self) -> None:
        if self.kind(self.mechanism) is not type(self):
            raise ConfigError(f"{type(self).__name__} cannot be built as {self.mechanism!r}")
        check_kary_objective(self.objective)
        check_branching(self.branching)
        if sum(Fraction(b) for b in self.budgets) > 1 or min(self.budgets) <= 0:
            raise ConfigError(
                f"level budgets must be > 0 with an exact sum <= 1, got {self.budgets}"
            )
        need = self.levels_for(self.horizon, self.branching)
        if len(self.budgets) != need:
            raise ConfigError(
                f"{self.mechanism} with k={self.branching}, N={self.horizon} has {need} levels; "
                f"got {len(self.budgets)} level budgets"
            )

    @staticmethod
    def kind(mechanism: str) -> type[KaryStrategy]:
        """The subclass decoding ``mechanism``, or :class:`ConfigError` if it is unknown."""
        return _KINDS[check_kary_mechanism(mechanism)]

    # ---------------------------------------------------------------- what subclasses state
    @staticmethod
    def levels_for(horizon: int, branching: int) -> int:
        """Levels ``L`` this decoder needs for ``horizon`` periods."""
        raise NotImplementedError

    def _block_counts(self) -> tuple[int, ...]:
        raise NotImplementedError

    def decode_noise(
        self, z: npt.NDArray[np.float64], node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        """Noise ``n_t`` of every release ``t = 1..N`` from node noise ``z`` (``(nodes, ...)``),
        given the nodes' actual noise variances ``node_var`` (``(nodes,)``)."""
        raise NotImplementedError

    def decode_noise_fixed(
        self, z: npt.NDArray[np.int64], node_var: npt.NDArray[np.float64]
    ) -> IntLike:
        """:meth:`decode_noise` in exact fixed point (units ``2^-FRACTION_BITS``, shape
        ``(N, ...)``), shift-equivariant: ``D(z + R e) = D(z) + A e`` exactly for integer
        ``e`` (:mod:`streamdp.continual.fixed_point`), so ``s_t + D(z)_t = D(R a + z)_t`` is a
        function of the noisy nodes alone. What releases are published from."""
        raise NotImplementedError

    def rounding_bound(self) -> float:
        """Public bound on ``|D(z)_t - n_t|`` for every ``t`` (counts): fixed-point decoding's
        distance from :meth:`decode_noise`'s exact arithmetic."""
        raise NotImplementedError

    def total_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        """``Var(s~_t)``, ``t = 1..N``, for independent node noise of variances ``node_var``."""
        raise NotImplementedError

    def count_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        """``Var(s~_t - s~_{t-1})``, ``t = 1..N``."""
        raise NotImplementedError

    def range_coefficients(
        self, first: int, last: int, node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        """Coefficients ``m`` (``(nodes,)``) of the noise ``sum_i m_i z_i`` of the released sum
        over periods ``first..last`` (``s~_last - s~_{first-1}``)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- structure
    @property
    def levels(self) -> int:
        """Number of levels ``L``."""
        return len(self.budgets)

    @cached_property
    def blocks(self) -> tuple[int, ...]:
        """Blocks (nodes) per level."""
        return self._block_counts()

    @property
    def node_count(self) -> int:
        """Total nodes (about ``N k / (k - 1)``)."""
        return sum(self.blocks)

    @property
    def state_values_per_counter(self) -> int:
        """Stored noise values per counter for one epoch (one per node)."""
        return self.node_count

    @cached_property
    def level_offsets(self) -> tuple[int, ...]:
        """Index of each level's first node in the flat (level-major) node order."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.blocks)[:-1]]))

    @cached_property
    def node_levels(self) -> IntArray:
        """Level of every node; shape ``(nodes,)``."""
        return np.repeat(np.arange(self.levels, dtype=np.int64), self.blocks)

    @cached_property
    def weights(self) -> FloatArray:
        """Budget share ``lambda_i`` of every node; shape ``(nodes,)``, read-only."""
        w = np.asarray(self.budgets, dtype=np.float64)[self.node_levels]
        w.flags.writeable = False
        return w

    def node_intervals(self) -> tuple[IntArray, IntArray]:
        """``(first, last)`` period of every node, 1-based, ``last`` clipped to the horizon
        (a digits block wholly past the horizon has ``first > last``: it covers no period)."""
        first = []
        last = []
        for level, count in enumerate(self.blocks):
            size = self.branching**level
            j = np.arange(count, dtype=np.int64)
            first.append(j * size + 1)
            last.append(np.minimum((j + 1) * size, self.horizon))
        return np.concatenate(first), np.concatenate(last)

    def split(self, per_node: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
        """Split a node-indexed array (shape ``(nodes, ...)``) into per-level arrays."""
        values = np.asarray(per_node)
        if values.shape[0] != self.node_count:
            raise ConfigError(f"expected {self.node_count} node values, got {values.shape[0]}")
        return [values[o : o + b] for o, b in zip(self.level_offsets, self.blocks, strict=True)]

    def _check_range(self, first: int, last: int) -> None:
        if not 1 <= first <= last <= self.horizon:
            raise ConfigError(
                f"range must satisfy 1 <= first <= last <= {self.horizon}, got {first}..{last}"
            )

    def range_variance(self, first: int, last: int, node_var: npt.NDArray[np.float64]) -> float:
        """``Var(s~_last - s~_{first-1})``: the calendar range ``first..last`` (1-based)."""
        m = self.range_coefficients(first, last, node_var)
        return float(np.sum(m * m * np.asarray(node_var, dtype=np.float64)))


@dataclass(frozen=True)
class DigitsStrategy(KaryStrategy):
    """Negative-digit decoding (Andersson, Pagh, Torkamani 2024): +-1 blocks per release."""

    @staticmethod
    def levels_for(horizon: int, branching: int) -> int:
        return digit_levels(horizon, branching)

    @cached_property
    def _all_paths(self) -> DigitPaths:
        t = np.arange(1, self.horizon + 1, dtype=np.int64)
        return digit_paths(t, self.branching, self.levels)

    def _block_counts(self) -> tuple[int, ...]:
        return tuple(max(1, int(h)) for h in self._all_paths.hi.max(axis=1))

    def decode_noise(
        self,
        z: npt.NDArray[np.float64],
        node_var: npt.NDArray[np.float64],  # noqa: ARG002 - the decoding is fixed
    ) -> FloatArray:
        return digits_decode(self.split(np.asarray(z, dtype=np.float64)), self._all_paths)

    def decode_noise_fixed(
        self,
        z: npt.NDArray[np.int64],
        node_var: npt.NDArray[np.float64],  # noqa: ARG002 - the decoding is fixed
    ) -> IntLike:
        return digits_fixed(digits_decode_integers(self.split(z), self._all_paths))

    def rounding_bound(self) -> float:
        return 0.0  # integer sums of node noise: exact

    def total_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        p = self._all_paths
        return digits_covariance(p, p, self.split(np.asarray(node_var, dtype=np.float64)))

    def count_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        parts = self.split(np.asarray(node_var, dtype=np.float64))
        return digits_count_variances(self.horizon, self.branching, self.levels, parts)

    def range_coefficients(
        self,
        first: int,
        last: int,
        node_var: npt.NDArray[np.float64],  # noqa: ARG002 - the decoding is fixed
    ) -> FloatArray:
        """The +-1 blocks of ``last`` minus those of ``first - 1``."""
        self._check_range(first, last)
        out = np.zeros(self.node_count)
        for t, s in ((last, 1.0), (first - 1, -1.0)):
            p = digit_paths(np.array([t], dtype=np.int64), self.branching, self.levels)
            for level, offset in enumerate(self.level_offsets):
                lo, hi = int(p.lo[level, 0]), int(p.hi[level, 0])
                out[offset + lo : offset + hi] += s * float(p.sign[level, 0])
        return out


@dataclass(frozen=True)
class GlsStrategy(KaryStrategy):
    """GLS decoding: the least-squares estimate of every prefix from all blocks.

    Each node is weighed by ``1 / node_var`` (the exact inverse covariance), so the estimate is
    the best linear unbiased one and the variances computed with the same ``node_var`` are
    exact.
    """

    @staticmethod
    def levels_for(horizon: int, branching: int) -> int:
        return gls_levels(horizon, branching)

    def _block_counts(self) -> tuple[int, ...]:
        return tuple(
            level.blocks for level in gls_tree_levels(self.horizon, self.branching, self.levels)
        )

    def decode_noise(
        self, z: npt.NDArray[np.float64], node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        parts = self.split(np.asarray(z, dtype=np.float64))
        estimate = gls_estimate(parts, self.split(node_var), self.branching)
        out: FloatArray = np.cumsum(estimate, axis=0)
        return out

    def decode_noise_fixed(
        self, z: npt.NDArray[np.int64], node_var: npt.NDArray[np.float64]
    ) -> IntLike:
        parts = self.split(np.asarray(z, dtype=np.int64))
        return running_totals(gls_fixed_estimate(parts, self.split(node_var), self.branching))

    def rounding_bound(self) -> float:
        return gls_rounding_bound(self.branching, self.blocks)

    def total_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        parts = self.split(np.asarray(node_var, dtype=np.float64))
        return gls_variances(parts, self.branching)[0]

    def count_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        parts = self.split(np.asarray(node_var, dtype=np.float64))
        return gls_variances(parts, self.branching)[1]

    def range_coefficients(
        self, first: int, last: int, node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        """``m = W R (R'WR)^-1 1_[first, last]`` (one two-pass solve, O(nodes))."""
        self._check_range(first, last)
        parts = self.split(np.asarray(node_var, dtype=np.float64))
        b = np.zeros(self.horizon)
        b[first - 1 : last] = 1.0
        c = exclusive_cumsum(gls_solve(b, parts, self.branching))
        sums = []
        for level, v in enumerate(parts):
            size = self.branching**level
            j = np.arange(v.shape[0])
            sums.append((c[np.minimum((j + 1) * size, self.horizon)] - c[j * size]) / v)
        return np.concatenate(sums)


_KINDS: dict[str, type[KaryStrategy]] = {
    "kary_digits": DigitsStrategy,
    "kary_gls": GlsStrategy,
}
