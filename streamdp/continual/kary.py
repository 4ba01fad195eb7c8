"""k-ary block trees for continual counting: negative-digit decoding and GLS decoding.

Both mechanisms release, for every level ``l = 0..L-1``, every block of ``k^l`` consecutive
periods with budget ``epsilon * budgets[l]`` (``sum budgets <= 1``; one event touches one block
per level, so the release is ``epsilon``-DP per event). Node noise ``z_i`` of every block of the
epoch is drawn at the epoch's start; release ``t`` is the exact running total plus a fixed linear
image of ``z``: ``s~_t = s_t + n_t``, ``n = M z`` (DESIGN §3, "Beyond FDA").

- ``kary_digits`` (Andersson, Pagh, Torkamani 2024, "Count on your elders"): write
  ``t = sum_l d_l k^l`` with digits ``d_l`` in ``-(ceil(k/2) - 1) .. floor(k/2)`` (``k = 20``:
  ``-9..10``). From the top level down, the position moves by ``d_l`` whole blocks of size
  ``k^l``, adding the blocks passed over when moving forward and subtracting them when moving
  back. Each level uses at most ``floor(k/2)`` blocks, against ``k - 1`` without subtraction.
  A block may end after ``t`` (period ``t + 1..`` not yet seen): only its noise is used at ``t``,
  which is drawn in advance, so the release is still computable online.
- ``kary_gls``: the generalised least-squares estimate of every prefix from ALL nodes,
  ``s^ = A (R'WR)^-1 R'W y = s + n``, ``n = A (R'WR)^-1 R'W z``; computed on the tree by two
  passes (bottom-up inverse-variance combination, top-down distribution of each parent's
  residual to its children in proportion to their variances: Hay et al.'s boosting with
  weights), O(nodes). Exact variances of every prefix, period count and range come from the
  same tree recursion (see :func:`gls_total_variances`).

Node numbering: level-major, 1-based; level ``l`` block ``j`` (0-based) is node
``level_offset[l] + j + 1`` and covers periods ``j k^l + 1 .. (j + 1) k^l`` (clipped to the
horizon for GLS; digits may use a block that ends past the horizon, whose periods past ``N``
never occur). Units: variances in counts^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from streamdp.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

KaryMechanism = Literal["kary_digits", "kary_gls"]
KARY_MECHANISMS: tuple[KaryMechanism, ...] = ("kary_digits", "kary_gls")
KaryObjective = Literal["total", "minimax", "count"]
KARY_OBJECTIVES: tuple[KaryObjective, ...] = ("total", "minimax", "count")
MAX_BRANCHING = 64
_SEARCH_BRANCHINGS = tuple(range(2, 41))


def check_kary_objective(objective: str) -> KaryObjective:
    """``objective`` typed, or :class:`ConfigError` naming the allowed values."""
    for known in KARY_OBJECTIVES:
        if objective == known:
            return known
    raise ConfigError(
        f"objective must be one of {', '.join(KARY_OBJECTIVES)} for the k-ary mechanisms "
        f"(total: mean running-total error; minimax: worst running total; count: period "
        f"counts), got {objective!r}"
    )


def check_kary_mechanism(mechanism: str) -> KaryMechanism:
    """``mechanism`` typed, or :class:`ConfigError`."""
    for known in KARY_MECHANISMS:
        if mechanism == known:
            return known
    raise ConfigError(f"k-ary mechanism must be one of {KARY_MECHANISMS}, got {mechanism!r}")


def check_branching(branching: int) -> int:
    """``k`` must be an integer in ``2..MAX_BRANCHING``."""
    if (
        isinstance(branching, bool)
        or not isinstance(branching, int | np.integer)
        or not 2 <= branching <= MAX_BRANCHING
    ):
        raise ConfigError(
            f"branching (k) must be an integer in 2..{MAX_BRANCHING}, got {branching!r}"
        )
    return int(branching)


def exact_budgets(fractions: npt.ArrayLike) -> tuple[float, ...]:
    """Per-level budget fractions as floats whose EXACT (rational) sum is at most 1.

    Normalises ``fractions`` (all > 0) and, if float rounding left the exact sum above 1,
    scales down by one part in 2^50 until it is not.
    """
    raw = np.asarray(fractions, dtype=np.float64)
    if raw.ndim != 1 or raw.size == 0 or not np.all(np.isfinite(raw)) or np.any(raw <= 0):
        raise ConfigError(f"level budgets must be a non-empty list of numbers > 0, got {raw}")
    values = raw / raw.sum()
    while sum(Fraction(float(v)) for v in values) > 1:
        values = values * (1.0 - 2.0**-50)
    return tuple(float(v) for v in values)


def exact_scale(sensitivity: float, epsilon: float | Fraction, weight: float) -> float:
    """``Delta / (epsilon * weight)`` rounded UP so that ``Delta / b <= epsilon * weight``
    holds exactly (as rationals, ``epsilon`` exact): a node never spends more than its share."""
    eps = Fraction(epsilon)
    b = sensitivity / (float(eps) * weight)
    while Fraction(sensitivity) / Fraction(b) > eps * Fraction(weight):
        b = math.nextafter(b, math.inf)
    return b


def digit_range(branching: int) -> tuple[int, int]:
    """Smallest and largest digit of the negative-digit system: ``k = 20`` gives ``(-9, 10)``."""
    k = check_branching(branching)
    return -(-(-k // 2) - 1), k // 2


def balanced_digits(t: IntArray, branching: int, levels: int) -> IntArray:
    """Digits ``d[l, i]`` of ``t[i] = sum_l d[l, i] k^l`` in :func:`digit_range`; ``(L, n)``.

    Raises :class:`ConfigError` if ``levels`` digits do not suffice for some ``t``.
    """
    k = check_branching(branching)
    _, hi = digit_range(k)
    rest = np.asarray(t, dtype=np.int64).copy()
    out = np.zeros((levels, rest.shape[0]), dtype=np.int64)
    for level in range(levels):
        d = rest % k
        d[d > hi] -= k
        out[level] = d
        rest = (rest - d) // k
    if np.any(rest != 0):
        raise ConfigError(f"{levels} digits of base {k} do not represent every t")
    return out


def digit_levels(horizon: int, branching: int) -> int:
    """Fewest levels whose negative-digit representations cover every ``t = 1..N``."""
    k = check_branching(branching)
    _, hi = digit_range(k)
    levels = 1
    # largest representable value with L digits: hi * (k^L - 1) / (k - 1); every t below it
    # is representable (the digit system is complete on that range)
    while hi * (k**levels - 1) // (k - 1) < horizon:
        levels += 1
    return levels


def gls_levels(horizon: int, branching: int) -> int:
    """``L = floor(log_k N) + 1``: block sizes ``1, k, .., k^(L-1) <= N``."""
    k = check_branching(branching)
    levels, size = 1, k
    while size <= horizon:
        levels += 1
        size *= k
    return levels


# ---------------------------------------------------------------------------------- GLS maths
@dataclass(frozen=True)
class _Level:
    """One level of the GLS tree: block count, and each block's parent block (next level)."""

    blocks: int
    size: int  # nominal block size k^l


def _tree_levels(horizon: int, branching: int, levels: int) -> list[_Level]:
    return [
        _Level(blocks=-(-horizon // branching**level), size=branching**level)
        for level in range(levels)
    ]


def _group_sums(values: npt.NDArray[np.float64], branching: int) -> FloatArray:
    """Sum consecutive groups of ``branching`` rows (the last group may be short)."""
    starts = np.arange(0, values.shape[0], branching)
    out: FloatArray = np.add.reduceat(values, starts, axis=0)
    return out


def gls_bottom_up(
    node_var: list[FloatArray], branching: int
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Variances ``V`` of each node's subtree-only estimate and the children's variance sums.

    ``node_var[l]`` shape ``(B_l,)``. Returns ``(V, S)`` per level: ``V[l]`` shape ``(B_l,)``;
    ``S[l]`` shape ``(B_l,)`` for ``l >= 1`` is the sum of the children's ``V`` (``S[0]`` is
    empty). A virtual root (no measurement) joins the top level when it has several blocks.
    """
    V = [np.asarray(node_var[0], dtype=np.float64)]
    S = [np.zeros(0, dtype=np.float64)]
    for level in range(1, len(node_var)):
        child_sum = _group_sums(V[-1], branching)
        v = np.asarray(node_var[level], dtype=np.float64)
        S.append(child_sum)
        V.append(1.0 / (1.0 / v + 1.0 / child_sum))
    return V, S


def gls_estimate(y: list[FloatArray], node_var: list[FloatArray], branching: int) -> FloatArray:
    """GLS estimate of every period from noisy block sums ``y[l]`` (shape ``(B_l, ...)``).

    Two passes, O(nodes): bottom-up ``u_v = V_v (y_v / v_v + sum_c u_c / S_v)``; top-down
    ``x^_c = u_c + (V_c / S_v)(x^_v - sum_c u_c)``. Returns shape ``(N, ...)``. Exactly
    ``(R'WR)^-1 R'W y`` (checked against the dense solve in the tests).
    """
    V, S = gls_bottom_up(node_var, branching)
    u = [np.asarray(y[0], dtype=np.float64)]
    child_u: list[FloatArray] = [np.zeros(0)]
    for level in range(1, len(y)):
        cu = _group_sums(u[-1], branching)
        child_u.append(cu)
        v = np.asarray(node_var[level], dtype=np.float64)
        shape = (-1,) + (1,) * (cu.ndim - 1)
        u.append(
            V[level].reshape(shape)
            * (np.asarray(y[level]) / v.reshape(shape) + cu / S[level].reshape(shape))
        )
    top = len(y) - 1
    est = u[top]  # under a virtual root the top blocks keep their own estimates
    for level in range(top, 0, -1):
        gain = np.repeat(1.0 / S[level], branching)[: V[level - 1].shape[0]] * V[level - 1]
        resid = np.repeat(est - child_u[level], branching, axis=0)[: V[level - 1].shape[0]]
        shape = (-1,) + (1,) * (resid.ndim - 1)
        est = u[level - 1] + gain.reshape(shape) * resid
    return est


def _parent_prefix(values: FloatArray, branching: int) -> FloatArray:
    """Exclusive cumulative sum of ``values`` within each group of ``branching`` siblings."""
    c = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(values.shape[0])
    out: FloatArray = c[idx] - c[(idx // branching) * branching]
    return out


def _with_root(
    V: list[FloatArray], S: list[FloatArray]
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Add a virtual root (no measurement: ``V_root = S_root = sum of the top level's V``)
    when the top level has several blocks, so every recursion ends at a single node."""
    if V[-1].shape[0] == 1:
        return V, S
    root = np.array([float(V[-1].sum())])
    return [*V, root], [*S, root]


def gls_variances(
    node_var: list[FloatArray], branching: int, periods: IntArray | None = None
) -> tuple[FloatArray, FloatArray]:
    """Exact ``Var(s^_t)`` (running totals) and ``Var(x^_t)`` (period counts).

    ``periods``: 0-based periods ``t - 1`` to evaluate (default all ``N``); returns two arrays
    of that shape. Posterior recursion (valid for any noise with these variances: the
    estimator is linear, so only second moments matter). Given a parent's error ``e_v``,
    child ``c``'s error is ``g_c e_v + xi_c`` with ``g_c = V_c / S_v`` and
    ``Cov(xi) = diag(V) - V V' / S_v``, independent of ``e_v``. The error of the prefix of the
    first ``r`` periods of node ``v`` is ``h_v(r) e_v + eta_v(r)``; with ``r`` inside child
    ``j``: ``h_v = sum_{i<j} g_i + g_j h_j`` and
    ``Var(eta_v) = Var(eta_j) + Vp + h_j^2 V_j - (Vp + h_j V_j)^2 / S_v``
    (``Vp = sum_{i<j} V_i``). At the root ``Var = h^2 V_root + Var(eta)``. Period counts:
    ``Var(e_c) = g_c^2 Var(e_v) + V_c - V_c^2 / S_v`` from the top down.
    Cost O(nodes) for the bottom-up pass plus O(L) per evaluated period.
    """
    V, S = _with_root(*gls_bottom_up(node_var, branching))
    n = V[0].shape[0]
    where = np.arange(n) if periods is None else np.asarray(periods, dtype=np.int64)
    h = np.ones(where.shape[0], dtype=np.float64)
    Q = np.zeros(where.shape[0], dtype=np.float64)
    steps = []
    for level in range(1, len(V)):
        child_V = V[level - 1]
        gain = child_V / np.repeat(S[level], branching)[: child_V.shape[0]]
        block = where // branching ** (level - 1)  # the child block holding each period
        s_v = S[level][block // branching]
        vj = child_V[block]
        g = gain[block]
        vp = _parent_prefix(child_V, branching)[block]
        gp = _parent_prefix(gain, branching)[block]
        Q = Q + vp + h * h * vj - (vp + h * vj) ** 2 / s_v
        h = gp + g * h
        steps.append((g, vj))
    top_var = float(V[-1][0])
    total: FloatArray = h * h * top_var + Q
    err = np.full(where.shape[0], top_var)
    for g, vj in reversed(steps):
        err = g * g * err + vj - g * vj
    return total, err


def gls_solve(b: FloatArray, node_var: list[FloatArray], branching: int) -> FloatArray:
    """``(R'WR)^-1 b`` for a period vector ``b`` (shape ``(N,)``) by the two-pass estimator.

    The estimator maps ``y`` to ``(R'WR)^-1 R'W y``; leaf measurements ``y_0 = b v_0`` and
    zeros elsewhere give ``R'W y = b``.
    """
    y = [np.asarray(b, dtype=np.float64) * node_var[0]]
    y += [np.zeros(v.shape[0]) for v in node_var[1:]]
    return gls_estimate(y, node_var, branching)


# ------------------------------------------------------------------------- negative digits
@dataclass(frozen=True)
class DigitPaths:
    """Blocks each release ``t`` uses, level by level: ``[lo, hi)`` block indices, ``sign``.

    Arrays shape ``(L, n)`` for the ``n`` requested releases (``t = 0`` uses nothing).
    """

    lo: IntArray
    hi: IntArray
    sign: IntArray


def digit_paths(t: IntArray, branching: int, levels: int) -> DigitPaths:
    """The negative-digit decomposition of each ``t`` (see the module docstring)."""
    k = check_branching(branching)
    d = balanced_digits(t, k, levels)
    lo = np.zeros_like(d)
    hi = np.zeros_like(d)
    position = np.zeros(d.shape[1], dtype=np.int64)  # sum of the digits above, in periods
    for level in range(levels - 1, -1, -1):
        q = position // k**level
        lo[level] = np.minimum(q, q + d[level])
        hi[level] = np.maximum(q, q + d[level])
        position = position + d[level] * k**level
    return DigitPaths(lo=lo, hi=hi, sign=np.sign(d))


def _exclusive_cumsum(values: npt.NDArray[np.float64]) -> FloatArray:
    zero = np.zeros((1, *values.shape[1:]), dtype=np.float64)
    out: FloatArray = np.concatenate([zero, np.cumsum(values, axis=0, dtype=np.float64)])
    return out


def digits_decode(z: list[FloatArray], paths: DigitPaths) -> FloatArray:
    """``n_t = sum_l sign * (sum of z over blocks lo..hi-1)``; shape ``(n, ...)``."""
    out: FloatArray | None = None
    for level, zl in enumerate(z):
        c = _exclusive_cumsum(np.asarray(zl, dtype=np.float64))
        part = c[paths.hi[level]] - c[paths.lo[level]]
        sign = paths.sign[level].reshape((-1,) + (1,) * (part.ndim - 1))
        out = sign * part if out is None else out + sign * part
    assert out is not None
    return out


def digits_covariance(
    first: DigitPaths, second: DigitPaths, node_var: list[FloatArray]
) -> FloatArray:
    """``Cov(n_t, n_u)`` for paired releases: ``sum_l sign_t sign_u Var(z over the overlap)``."""
    out = np.zeros(first.lo.shape[1], dtype=np.float64)
    for level, v in enumerate(node_var):
        c = _exclusive_cumsum(np.asarray(v, dtype=np.float64))
        lo = np.maximum(first.lo[level], second.lo[level])
        hi = np.maximum(np.minimum(first.hi[level], second.hi[level]), lo)
        out += first.sign[level] * second.sign[level] * (c[hi] - c[lo])
    return out


# ------------------------------------------------------------------------------ strategy
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
            kind = _KINDS[check_kary_mechanism(name)]
        return object.__new__(kind)

    def __post_init__(self) -> None:
        if _KINDS[check_kary_mechanism(self.mechanism)] is not type(self):
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

    # ---------------------------------------------------------------- what subclasses state
    @staticmethod
    def levels_for(horizon: int, branching: int) -> int:
        """Levels ``L`` this decoder needs for ``horizon`` periods."""
        raise NotImplementedError

    def _block_counts(self) -> tuple[int, ...]:
        raise NotImplementedError

    @staticmethod
    def sample_layout(horizon: int, branching: int, levels: int, sample: IntArray) -> Any:
        """Budget-independent data for :meth:`sample_variances` at releases ``sample``."""
        raise NotImplementedError

    @staticmethod
    def sample_variances(
        layout: Any, level_var: npt.NDArray[np.float64], branching: int
    ) -> tuple[FloatArray, FloatArray]:
        """Running-total and period-count variances at the sampled releases when every block
        of level ``l`` has variance ``level_var[l]`` (what the optimiser scores)."""
        raise NotImplementedError

    def decode_noise(
        self, z: npt.NDArray[np.float64], node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        """Noise ``n_t`` of every release ``t = 1..N`` from node noise ``z`` (``(nodes, ...)``),
        given the nodes' actual noise variances ``node_var`` (``(nodes,)``)."""
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

    def split(self, per_node: npt.NDArray[np.float64]) -> list[FloatArray]:
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

    @staticmethod
    def sample_layout(
        horizon: int,  # noqa: ARG004 - the digit walk does not depend on N
        branching: int,
        levels: int,
        sample: IntArray,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per level: blocks used by ``t``, by ``t - 1``, and their signed overlap."""
        now = digit_paths(sample, branching, levels)
        before = digit_paths(sample - 1, branching, levels)
        lo = np.maximum(now.lo, before.lo)
        overlap = np.maximum(np.minimum(now.hi, before.hi) - lo, 0)
        return (
            (now.hi - now.lo).astype(np.float64),
            (before.hi - before.lo).astype(np.float64),
            (now.sign * before.sign * overlap).astype(np.float64),
        )

    @staticmethod
    def sample_variances(
        layout: Any,
        level_var: npt.NDArray[np.float64],
        branching: int,  # noqa: ARG004 - in the layout already
    ) -> tuple[FloatArray, FloatArray]:
        now_len, before_len, cross = layout
        total: FloatArray = level_var @ now_len
        count: FloatArray = total + level_var @ before_len - 2.0 * (level_var @ cross)
        return total, count

    def decode_noise(
        self,
        z: npt.NDArray[np.float64],
        node_var: npt.NDArray[np.float64],  # noqa: ARG002 - the decoding is fixed
    ) -> FloatArray:
        return digits_decode(self.split(np.asarray(z, dtype=np.float64)), self._all_paths)

    def total_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        p = self._all_paths
        return digits_covariance(p, p, self.split(np.asarray(node_var, dtype=np.float64)))

    def count_variances(self, node_var: npt.NDArray[np.float64]) -> FloatArray:
        parts = self.split(np.asarray(node_var, dtype=np.float64))
        t = np.arange(0, self.horizon + 1, dtype=np.int64)
        p = digit_paths(t, self.branching, self.levels)
        own = digits_covariance(p, p, parts)
        now = DigitPaths(lo=p.lo[:, 1:], hi=p.hi[:, 1:], sign=p.sign[:, 1:])
        before = DigitPaths(lo=p.lo[:, :-1], hi=p.hi[:, :-1], sign=p.sign[:, :-1])
        out: FloatArray = own[1:] + own[:-1] - 2.0 * digits_covariance(now, before, parts)
        return out

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
            level.blocks for level in _tree_levels(self.horizon, self.branching, self.levels)
        )

    @staticmethod
    def sample_layout(horizon: int, branching: int, levels: int, sample: IntArray) -> Any:
        return _uniform_layout(horizon, branching, levels, sample - 1)

    @staticmethod
    def sample_variances(
        layout: Any, level_var: npt.NDArray[np.float64], branching: int
    ) -> tuple[FloatArray, FloatArray]:
        return _uniform_eval(level_var, layout, branching)

    def decode_noise(
        self, z: npt.NDArray[np.float64], node_var: npt.NDArray[np.float64]
    ) -> FloatArray:
        parts = self.split(np.asarray(z, dtype=np.float64))
        estimate = gls_estimate(parts, self.split(node_var), self.branching)
        out: FloatArray = np.cumsum(estimate, axis=0)
        return out

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
        c = _exclusive_cumsum(gls_solve(b, parts, self.branching))
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


# ------------------------------------------------------------------------------ optimiser
_SAMPLE_PERIODS = 8_192  # objective evaluated on this many well-spread t when N is larger
_TUNE_WITHIN = 1.10  # level counts whose best equal-budget score is this close get tuned
_REFINED = 4  # k re-tuned from their level count's budgets
MIN_LEVEL_SHARE = 0.01  # every level keeps at least this share of epsilon


def _levels_for(mechanism: KaryMechanism, horizon: int, branching: int) -> int:
    return _KINDS[mechanism].levels_for(horizon, branching)


@dataclass(frozen=True)
class _UniformLayout:
    """Where each requested period sits in a k-ary tree, per step up (budget-independent)."""

    blocks: tuple[int, ...]  # per level, with a virtual root level when needed
    virtual_root: bool
    earlier_siblings: tuple[FloatArray, ...]  # per step up: child block index mod k
    last_child: tuple[npt.NDArray[np.bool_], ...]  # the child block is its level's last
    last_parent: tuple[npt.NDArray[np.bool_], ...]  # the parent block is its level's last


def _uniform_layout(horizon: int, branching: int, levels: int, periods: IntArray) -> _UniformLayout:
    k = branching
    blocks = [level.blocks for level in _tree_levels(horizon, k, levels)]
    virtual = blocks[-1] > 1
    if virtual:
        blocks.append(1)
    where = np.asarray(periods, dtype=np.int64)
    siblings, last_child, last_parent = [], [], []
    for level in range(1, len(blocks)):
        block = where // k ** (level - 1)
        siblings.append((block % k).astype(np.float64))
        last_child.append(block == blocks[level - 1] - 1)
        last_parent.append(block // k == blocks[level] - 1)
    return _UniformLayout(
        tuple(blocks), virtual, tuple(siblings), tuple(last_child), tuple(last_parent)
    )


def _uniform_eval(
    level_var: npt.NDArray[np.float64], layout: _UniformLayout, branching: int
) -> tuple[FloatArray, FloatArray]:
    k = branching
    inverse = [1.0 / float(v) for v in level_var] + ([0.0] if layout.virtual_root else [])
    blocks = layout.blocks
    full = [float(level_var[0])]
    last = [float(level_var[0])]
    s_full = [0.0]
    s_last = [0.0]
    for level in range(1, len(inverse)):
        children_of_last = blocks[level - 1] - (blocks[level] - 1) * k
        s_full.append(k * full[-1])
        s_last.append((children_of_last - 1) * full[-1] + last[-1])
        full.append(1.0 / (inverse[level] + 1.0 / s_full[-1]))
        last.append(1.0 / (inverse[level] + 1.0 / s_last[-1]))
    n = layout.earlier_siblings[0].shape[0] if layout.earlier_siblings else None
    h: FloatArray | float = 1.0
    Q: FloatArray | float = 0.0
    steps = []
    for step in range(len(inverse) - 1):
        level = step + 1
        s_v = np.where(layout.last_parent[step], s_last[level], s_full[level])
        vj = np.where(layout.last_child[step], last[level - 1], full[level - 1])
        vp = layout.earlier_siblings[step] * full[level - 1]  # the last block is never earlier
        g = vj / s_v
        Q = Q + vp + h * h * vj - (vp + h * vj) ** 2 / s_v
        h = vp / s_v + g * h
        steps.append((g, vj))
    top = last[-1]
    total = np.asarray(h * h * top + Q, dtype=np.float64)
    err: FloatArray | float = top
    for g, vj in reversed(steps):
        err = g * g * err + vj - g * vj
    errors = np.asarray(err, dtype=np.float64)
    if n is not None:
        total = np.broadcast_to(total, (n,)).copy()
        errors = np.broadcast_to(errors, (n,)).copy()
    return total, errors


def gls_uniform_variances(
    level_var: npt.NDArray[np.float64], horizon: int, branching: int, periods: IntArray
) -> tuple[FloatArray, FloatArray]:
    """:func:`gls_variances` when every block of a level has one variance ``level_var[l]``.

    Only two kinds of block exist per level (full ones, all alike, and the last one), so the
    bottom-up pass is O(L) and each requested period (0-based) costs O(L): no O(N) work, which
    is what makes optimising k and the budgets affordable at N = 10^6.
    """
    where = np.asarray(periods, dtype=np.int64)
    layout = _uniform_layout(horizon, branching, len(level_var), where)
    total, err = _uniform_eval(level_var, layout, branching)
    if not layout.earlier_siblings:  # one block, no step up: N = 1
        total = np.full(where.shape[0], float(total[0]) if total.ndim else float(total))
        err = np.full(where.shape[0], float(err[0]) if err.ndim else float(err))
    return total, err


class _Scorer:
    """The objective of one ``(mechanism, objective, N, k)`` as a function of level budgets
    (``Delta = epsilon = 1``, continuous Laplace: ``v = 2 / lambda^2``), on ``sample``."""

    def __init__(
        self,
        mechanism: KaryMechanism,
        objective: KaryObjective,
        horizon: int,
        branching: int,
        sample: IntArray,
    ) -> None:
        self.mechanism, self.objective = mechanism, objective
        self.horizon, self.branching, self.sample = horizon, branching, sample
        kind = _KINDS[mechanism]
        self.levels = kind.levels_for(horizon, branching)
        self._layout = kind.sample_layout(horizon, branching, self.levels, sample)
        self._variances = kind.sample_variances

    def __call__(self, budgets: npt.NDArray[np.float64]) -> float:
        level_var = 2.0 / np.asarray(budgets, dtype=np.float64) ** 2
        total, count = self._variances(self._layout, level_var, self.branching)
        if self.objective == "total":
            return float(total.mean())
        if self.objective == "minimax":
            return float(total.max())
        return float(count.mean())


def _sample(horizon: int) -> IntArray:
    """All ``t`` up to ``_SAMPLE_PERIODS``; beyond, a golden-ratio (Weyl) sequence over
    ``1..N`` plus ``t = 1`` and ``t = N``: spread evenly without aliasing with powers of k."""
    if horizon <= _SAMPLE_PERIODS:
        return np.arange(1, horizon + 1, dtype=np.int64)
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    spread = np.floor(np.mod(np.arange(_SAMPLE_PERIODS) * golden, 1.0) * horizon) + 1
    return np.unique(np.concatenate([[1, horizon], spread]).astype(np.int64))


def _floored(budgets: npt.NDArray[np.float64]) -> FloatArray:
    """Every level keeps at least ``MIN_LEVEL_SHARE`` of the budget (no absurd noise scales)."""
    floored = np.maximum(budgets, MIN_LEVEL_SHARE)
    out: FloatArray = floored / floored.sum()
    return out


def _softmax(theta: npt.NDArray[np.float64]) -> FloatArray:
    x = np.concatenate([[0.0], theta])
    e = np.exp(x - x.max())
    out: FloatArray = e / e.sum()
    return out


@lru_cache(maxsize=256)
def optimise(
    mechanism: str, objective: str, horizon: int, branching: int | None = None
) -> KaryStrategy:
    """The k-ary strategy minimising ``objective`` for exactly ``horizon`` periods (no padding).

    ``k``: ``branching`` if given, else searched over 2..40 with equal level budgets; for
    each number of levels ``L`` within 10% of the best, the level budgets of its best ``k``
    are tuned (Nelder-Mead on log-ratios, every level keeping at least 1% of the budget);
    every ``k`` is re-scored with its ``L``'s tuned budgets and the four best are tuned again.
    For ``N > 8,192`` the search scores a well-spread sample of 8,192 releases; the
    returned strategy's reported variances are always exact for every ``t``.
    """
    mech = check_kary_mechanism(mechanism)
    obj = check_kary_objective(objective)
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer) or horizon < 1:
        raise ConfigError(f"horizon must be an integer >= 1, got {horizon!r}")
    n = int(horizon)
    sample = _sample(n)
    candidates = [check_branching(branching)] if branching is not None else list(_SEARCH_BRANCHINGS)
    scorers = {k: _Scorer(mech, obj, n, k, sample) for k in candidates}
    scored = []
    for k, scorer in scorers.items():
        equal = np.full(scorer.levels, 1.0 / scorer.levels)
        scored.append((scorer(equal), k, equal))
    scored.sort(key=lambda item: item[0])

    def tune(k: int, start: FloatArray) -> tuple[float, FloatArray]:
        scorer = scorers[k]
        if start.shape[0] == 1:
            return scorer(start), start

        def f(theta: npt.NDArray[np.float64]) -> float:
            return scorer(_floored(_softmax(theta)))

        theta0 = np.log(start[1:] / start[0])
        result = minimize(
            f,
            theta0,
            method="Nelder-Mead",
            options={"maxfev": 100 + 40 * start.shape[0], "xatol": 1e-4, "fatol": 1e-9},
        )
        theta = np.asarray(result.x, dtype=np.float64)
        return f(theta), _floored(_softmax(theta))

    # tune once per level count (budgets depend mostly on L), re-score every k of that count
    # with those budgets, then refine the two best
    group_budgets: dict[int, FloatArray] = {}
    for value, k, equal in scored:
        levels = equal.shape[0]
        if levels not in group_budgets and value <= _TUNE_WITHIN * scored[0][0]:
            group_budgets[levels] = tune(k, equal)[1]
    rescored = sorted(
        ((scorers[k](group_budgets.get(equal.shape[0], equal)), k) for _, k, equal in scored),
    )
    best_value, best_k, best_budgets = scored[0]
    for _, k in rescored[:_REFINED]:
        levels = _levels_for(mech, n, k)
        value, budgets = tune(k, group_budgets.get(levels, np.full(levels, 1.0 / levels)))
        if value < best_value:
            best_value, best_k, best_budgets = value, k, budgets
    return KaryStrategy(
        mechanism=mech,
        objective=obj,
        horizon=n,
        branching=best_k,
        budgets=exact_budgets(best_budgets),
    )


def published_digits(horizon: int, branching: int = 20) -> KaryStrategy:
    """The published configuration: ``k = 20`` (digits -9..10), equal budget per level."""
    levels = digit_levels(horizon, branching)
    return KaryStrategy(
        mechanism="kary_digits",
        objective="total",
        horizon=horizon,
        branching=branching,
        budgets=exact_budgets(np.ones(levels)),
    )
