"""Analytic variance of every release of a continual counter (DESIGN §3).

Node ``i`` gets noise of scale ``b_i = Delta / (epsilon * lambda_i)``; its variance is
``2 b_i^2`` (continuous Laplace) or ``2 q_i / (1 - q_i)^2`` with ``q_i = exp(-1/b_i)`` (exact
discrete Laplace, what the counter draws). Node noises are independent, so

- running total ``s~_t``:  ``Var = sum_{i in path(t)} v_i``;
- period count ``s~_t - s~_{t-1}``: the nodes of the two read paths that differ,
  ``Var = v_t + Var(s~_{t-1}) - Var(s~_{t - lowbit(t)})`` for the tree (the shared tail of both
  paths is the read path of ``t - lowbit(t)``), and ``v_t`` for naive.

Units: counts^2 (the unit of the counted quantity, squared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.continual.strategy import CountingStrategy, Strategy
from streamdp.errors import BudgetError, ConfigError
from streamdp.noise.sampler import discrete_laplace_variances

Noise = Literal["laplace", "discrete-laplace"]
NOISES: tuple[Noise, ...] = ("laplace", "discrete-laplace")


def check_noise(noise: str) -> Noise:
    """Return ``noise`` typed as :data:`Noise`, or raise :class:`ConfigError`."""
    for known in NOISES:
        if noise == known:
            return known
    raise ConfigError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")


#: Largest noise scale (counts) a node may get. The discrete Laplace tail is
#: ``P(|Z| >= k) = 2 q^k / (1 + q) <= 2 exp(-k / b)``; at ``b = 2^40`` a node's noise reaches
#: ``2^56`` with probability below ``2 exp(-2^16)`` (about 10^-28462), so a sum of up to 64 noisy
#: nodes stays below ``2^62`` in magnitude and no int64 (OpenDP's sampling domain, and every
#: release) saturates or wraps while the true counts stay below ``2^61``; the reported standard
#: deviations stay finite (``sd <= 2^47``).
MAX_NOISE_SCALE = 2.0**40
#: Smallest noise scale: below it ``1/b`` overflows the float maths of the variances and the
#: noise is zero with probability ``1 - 2 exp(-2^40)`` (no privacy left to state).
MIN_NOISE_SCALE = 2.0**-40
#: Largest sensitivity Delta: an integer that float arithmetic holds exactly (and the noise scale
#: limit leaves room for).
MAX_SENSITIVITY = 2**40
#: Relative slack that bounds the float column sums of the weights from above (recursive
#: summation of at most 64 positive terms is off by less than ``64 * 2^-53 = 2^-47`` of the sum).
_COLUMN_SLACK = 1.0 + 2.0**-44

Epsilon = float | int | Decimal | Fraction


def exact_epsilon(epsilon: Epsilon) -> Fraction:
    """``epsilon`` as an exact rational; a float stands for the smaller of its exact binary value
    and the shortest decimal that prints it (``0.1`` -> ``1/10``: the spec's decimal text), so the
    loss guaranteed against it is never above the epsilon the operator wrote."""
    if isinstance(epsilon, float):
        if not math.isfinite(epsilon):
            raise ConfigError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        return min(Fraction(epsilon), Fraction(repr(epsilon)))
    if isinstance(epsilon, Decimal) and not epsilon.is_finite():
        raise ConfigError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return Fraction(epsilon)


def check_privacy(epsilon: Epsilon, sensitivity: float) -> tuple[float, float]:
    """Validate ``epsilon > 0`` and ``sensitivity > 0`` (finite); return them as floats."""
    eps, delta = float(epsilon), float(sensitivity)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ConfigError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not math.isfinite(delta) or delta <= 0.0:
        raise ConfigError(
            f"sensitivity (Delta, the L1 contribution bound of one event) must be a finite "
            f"number > 0, got {sensitivity!r}"
        )
    if delta > MAX_SENSITIVITY or Fraction(delta) != Fraction(sensitivity):
        raise ConfigError(
            f"sensitivity (Delta) must be at most 2^40 = {MAX_SENSITIVITY} and exact in float "
            f"arithmetic, got {sensitivity!r}"
        )
    return eps, delta


def _split(a: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Dekker's split: ``a = hi + lo`` exactly, each half with at most 26 significant bits."""
    c = 134217729.0 * a  # 2^27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_product(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(p, e)`` with ``p = fl(a*b)`` and ``a*b = p + e`` exactly (Dekker 1971; no FMA needed).

    Exact while no product over- or underflows, which the scale limits guarantee.
    """
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _at_most_product(
    x: npt.NDArray[np.float64], a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """Exactly ``x <= a*b`` elementwise (floats, no rounding anywhere in the decision).

    With ``a*b = p + e`` exactly and ``|e|`` at most half the float spacing at ``p`` on the side
    of the exact product: ``x < p`` implies ``x <= p - spacing <= a*b``; ``x == p`` needs
    ``e >= 0``; ``x > p`` implies ``x >= p + spacing > a*b``.
    """
    p, e = _two_product(a, b)
    result: npt.NDArray[np.bool_] = (x < p) | ((x == p) & (e >= 0.0))
    return result


@dataclass(frozen=True)
class NodeBudgets:
    """Exact per-node budgets of one configuration; arrays shape ``(N,)``, read-only.

    ``scales[i]`` is the noise scale of node ``i+1`` (counts). ``losses[i]`` is a float with
    ``Delta / scales[i] <= losses[i] <= epsilon * lambda_{i+1} / column_bound`` exactly, and
    ``column_bound`` is at least every exact column sum of the weights, so the losses of the nodes
    covering any period add up to at most epsilon (exactly, in rational arithmetic).
    """

    scales: npt.NDArray[np.float64]
    losses: npt.NDArray[np.float64]
    epsilon: Fraction
    sensitivity: float
    column_bound: Fraction


def _weight_column_bound(strategy: Strategy) -> Fraction:
    """The exact largest column sum ``max_p sum_{i covers p} lambda_i``, or 1 if larger.

    Every float weight is an integer multiple of ``2^-K`` (``K`` from the smallest weight's
    exponent), so the column sums are integer sums: each weight is split into two int64 limbs
    of 30 and at most 53 bits and the limbs are summed per column without rounding. When the
    weights span more than 2^30 (the limbs would not fit), a float sum with a proven relative
    slack is used instead.
    """
    weights = np.asarray(strategy.weights, dtype=np.float64)
    if not strategy.is_tree:  # one node per column: its weight is the exact column sum
        return max(Fraction(1), Fraction(float(np.max(weights))))
    _, exponents = np.frexp(weights)
    low, high = int(exponents.min()), int(exponents.max())
    if high - low > 30:
        top = float(np.max(fenwick_column_sums(weights)))
        return Fraction(max(1.0, top) * _COLUMN_SLACK)
    K = 53 - low
    scaled = np.ldexp(weights, K)  # integers below 2^(K + high) <= 2^83
    limb = 2.0**30
    hi = np.floor(scaled / limb)
    lo = scaled - hi * limb  # exact: an integer below 2^30
    hi_sums = _fenwick_column_sums_int(hi.astype(np.int64))
    lo_sums = _fenwick_column_sums_int(lo.astype(np.int64))
    hi_sums += lo_sums >> 30
    lo_sums &= (1 << 30) - 1
    top_hi = int(hi_sums.max())
    top_lo = int(lo_sums[hi_sums == top_hi].max())
    return max(Fraction(1), Fraction((top_hi << 30) + top_lo, 1 << K))


def _fenwick_column_sums_int(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    n = values.shape[0]
    out = np.zeros(n, dtype=np.int64)
    node = np.arange(1, n + 1, dtype=np.int64)
    period = node.copy()
    alive = node <= n
    while np.any(alive):
        period, node = period[alive], node[alive]
        out[period - 1] += values[node - 1]
        node = node + (node & -node)
        alive = node <= n
    return out


def fenwick_column_sums(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``sum_{i covers p} w_i`` for ``p = 1..N`` on the Fenwick tree; shape ``(N,)``."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[0]
    out = np.zeros(n, dtype=np.float64)
    node = np.arange(1, n + 1, dtype=np.int64)
    period = node.copy()
    alive = node <= n
    while np.any(alive):
        period, node = period[alive], node[alive]
        out[period - 1] += w[node - 1]
        node = node + (node & -node)
        alive = node <= n
    return out


def _scale_limit_error(
    scale: float, node: int, epsilon: Fraction, delta: float, *, too_large: bool
) -> ConfigError:
    if too_large:
        need = float(epsilon) * scale / MAX_NOISE_SCALE
        return ConfigError(
            f"epsilon {float(epsilon):.6g} with sensitivity {delta:g} gives node {node} the noise "
            f"scale {scale:.6g}, above the limit 2^40 = {MAX_NOISE_SCALE:.0f} (beyond it the "
            "discrete Laplace noise can saturate the int64 range of the sampler and the "
            "reported standard deviations stop being meaningful); raise epsilon to at least "
            f"{need:.3g}, lower the sensitivity, or choose a shorter horizon or another mechanism"
        )
    need = float(epsilon) * scale / MIN_NOISE_SCALE
    return ConfigError(
        f"epsilon {float(epsilon):.6g} with sensitivity {delta:g} gives node {node} the noise "
        f"scale {scale:.6g}, below the limit 2^-40 (the noise would be zero: no privacy to "
        f"state); lower epsilon to at most {need:.3g} or raise the sensitivity"
    )


@lru_cache(maxsize=64)
def _node_budgets(strategy: Strategy, epsilon: Fraction, sensitivity: float) -> NodeBudgets:
    delta = sensitivity
    bound = _weight_column_bound(strategy)
    # eps_per_weight * bound <= epsilon exactly
    eps_per_weight = float(epsilon / bound)
    while Fraction(eps_per_weight) * bound > epsilon:
        eps_per_weight = math.nextafter(eps_per_weight, 0.0)
    weights = np.asarray(strategy.weights, dtype=np.float64)
    estimate = delta / (eps_per_weight * weights)
    for too_large, node in ((True, int(np.argmax(estimate))), (False, int(np.argmin(estimate)))):
        scale = float(estimate[node])
        if (scale > MAX_NOISE_SCALE) if too_large else not scale >= MIN_NOISE_SCALE:
            raise _scale_limit_error(scale, node + 1, epsilon, delta, too_large=too_large)
    # losses: floats at most eps_per_weight * lambda_i, exactly
    per_weight = np.full_like(weights, eps_per_weight)
    losses = per_weight * weights
    low = ~_at_most_product(losses, per_weight, weights)
    losses[low] = np.nextafter(losses[low], 0.0)
    # scales: floats with Delta <= loss_i * scale_i, exactly (rounded up, at most a few ulps)
    target = np.full_like(weights, delta)
    scales = target / losses
    for _ in range(8):
        short = ~_at_most_product(target, losses, scales)
        if not short.any():
            break
        scales[short] = np.nextafter(scales[short], np.inf)
    else:
        raise BudgetError(
            f"could not round the noise scales of {strategy.mechanism}/{strategy.objective} "
            f"N={strategy.horizon} up to an exact budget (epsilon {float(epsilon)!r}, Delta "
            f"{delta!r}); this is a bug, please report it"
        )
    if not bool(np.all(_at_most_product(losses, per_weight, weights))):
        raise BudgetError("a node's loss exceeds its share of epsilon; this is a bug")
    scales.flags.writeable = False
    losses.flags.writeable = False
    budgets = NodeBudgets(scales, losses, epsilon, delta, bound)
    if float(delta).is_integer():
        check_with_opendp(strategy, budgets)
    return budgets


def node_budgets(strategy: Strategy, epsilon: Epsilon, sensitivity: float) -> NodeBudgets:
    """Exact per-node noise scales and losses of ``strategy`` at ``epsilon`` and ``Delta``.

    Raises :class:`ConfigError` for an invalid epsilon or Delta, or when a node's scale leaves
    ``[2^-40, 2^40]`` (see :data:`MAX_NOISE_SCALE`). Cached per configuration.
    """
    check_privacy(epsilon, sensitivity)
    return _node_budgets(strategy, exact_epsilon(epsilon), float(sensitivity))


def check_with_opendp(strategy: Strategy, budgets: NodeBudgets) -> None:
    """Ask OpenDP's own privacy map of the discrete Laplace measurement (the one the production
    sampler runs) for the loss of each node of the worst column and of the extreme scales, and
    raise :class:`BudgetError` unless each is at most ``epsilon * lambda_i`` and the worst
    column's losses add up to at most ``epsilon`` (exact rational comparison)."""
    from streamdp.noise.opendp_sampler import opendp_privacy_loss

    delta = int(budgets.sensitivity)
    worst = int(np.argmax(fenwick_column_sums(budgets.losses))) + 1 if strategy.is_tree else 1
    column = strategy.covering_nodes(worst)
    extremes = {int(np.argmax(budgets.scales)) + 1, int(np.argmin(budgets.scales)) + 1}
    losses: dict[int, Fraction] = {}
    for node in sorted(set(column) | extremes):
        loss = Fraction(opendp_privacy_loss(float(budgets.scales[node - 1]), delta))
        share = budgets.epsilon * Fraction(float(strategy.weights[node - 1]))
        if loss > share:
            raise BudgetError(
                f"OpenDP's privacy map gives node {node} the loss {float(loss)!r}, above its "
                f"share epsilon * lambda = {float(share)!r}; this is a bug, please report it"
            )
        losses[node] = loss
    column_loss = sum((losses[node] for node in column), Fraction(0))
    if column_loss > budgets.epsilon:
        raise BudgetError(
            f"OpenDP's privacy map gives period {worst} the total loss {float(column_loss)!r}, "
            f"above epsilon {float(budgets.epsilon)!r}; this is a bug, please report it"
        )


def node_scales(
    strategy: Strategy, epsilon: Epsilon, sensitivity: float
) -> npt.NDArray[np.float64]:
    """Noise scale of every node, ``Delta / (epsilon * lambda_i)`` rounded UP so that the loss
    ``Delta / scale_i`` is exactly at most ``epsilon * lambda_i`` and every column of losses adds
    up to at most ``epsilon`` (see :class:`NodeBudgets`); shape ``(N,)``, counts (a copy)."""
    return node_budgets(strategy, epsilon, sensitivity).scales.copy()


def scale_variances(scales: npt.NDArray[np.float64], noise: Noise) -> npt.NDArray[np.float64]:
    """Variance of Laplace (``2 b^2``) or exact discrete Laplace noise of each scale ``b``."""
    b = np.asarray(scales, dtype=np.float64)
    if check_noise(noise) == "laplace":
        return 2.0 * b * b
    return discrete_laplace_variances(b)


def node_variances(
    strategy: Strategy, epsilon: float, sensitivity: float, noise: Noise = "discrete-laplace"
) -> npt.NDArray[np.float64]:
    """Noise variance ``v_i`` of every node; shape ``(N,)``, counts^2."""
    return scale_variances(node_scales(strategy, epsilon, sensitivity), noise)


def total_variances(
    strategy: CountingStrategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t)`` for ``t = 1..N`` given node variances; shape ``(N,)`` (any strategy)."""
    return strategy.total_variances(np.asarray(node_var, dtype=np.float64))


def count_variances(
    strategy: CountingStrategy, node_var: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``Var(s~_t - s~_{t-1})`` for ``t = 1..N`` given node variances; shape ``(N,)``."""
    return strategy.count_variances(np.asarray(node_var, dtype=np.float64))


@dataclass(frozen=True)
class VarianceProfile:
    """Release variances of one configuration (counts^2); arrays shape ``(N,)``."""

    node: npt.NDArray[np.float64]
    total: npt.NDArray[np.float64]
    count: npt.NDArray[np.float64]

    @property
    def mean_variance(self) -> float:
        """Mean over ``t = 1..N`` of ``Var(s~_t)`` (the paper's per-release MSE)."""
        return float(self.total.mean())

    @property
    def max_variance(self) -> float:
        """Max over ``t = 1..N`` of ``Var(s~_t)``."""
        return float(self.total.max())


def variance_profile(
    strategy: Strategy, epsilon: float, sensitivity: float, noise: Noise = "discrete-laplace"
) -> VarianceProfile:
    """Node, running-total and period-count variances for every release of ``strategy``."""
    v = node_variances(strategy, epsilon, sensitivity, noise)
    return VarianceProfile(
        node=v, total=total_variances(strategy, v), count=count_variances(strategy, v)
    )
