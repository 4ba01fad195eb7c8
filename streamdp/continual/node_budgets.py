"""Exact per-node noise scales and losses of a one-node-per-period strategy (DESIGN §3).

Node ``i`` gets discrete Laplace noise of scale ``Delta / (epsilon * lambda_i)`` rounded UP so
that its loss is exactly at most ``epsilon * lambda_i`` and every period's column of losses
adds up to at most epsilon; each scale is kept inside the sampler's safe range
(:data:`streamdp.noise.sampler.MAX_NOISE_SCALE`) and, for integer Delta, checked against
OpenDP's own privacy map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from streamdp.continual.column_sums import fenwick_column_sums, weight_column_bound
from streamdp.continual.exact_float import at_most_product
from streamdp.continual.privacy import (
    Epsilon,
    check_privacy,
    exact_epsilon,
)
from streamdp.continual.strategy import Strategy
from streamdp.errors import BudgetError, ConfigError
from streamdp.noise.sampler import MAX_NOISE_SCALE, MIN_NOISE_SCALE


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
            f"{_three_digits(need, up=True)}, lower the sensitivity, or choose a shorter horizon "
            "or another mechanism"
        )
    need = float(epsilon) * scale / MIN_NOISE_SCALE
    return ConfigError(
        f"epsilon {float(epsilon):.6g} with sensitivity {delta:g} gives node {node} the noise "
        f"scale {scale:.6g}, below the limit 2^-40 (the noise would be zero: no privacy to "
        f"state); lower epsilon to at most {_three_digits(need, up=False)} or raise the "
        "sensitivity"
    )


def _three_digits(value: float, *, up: bool) -> str:
    """``value`` to 3 significant digits rounded away from the limit it is a bound for (with a
    margin for the scales' own rounding), so that the epsilon a message suggests is accepted
    (``.3g`` rounded to nearest: an audit's suggested 8.22e-11 was refused again)."""
    margin = 1 + 1e-9 if up else 1 - 1e-9
    rounding = ROUND_CEILING if up else ROUND_FLOOR
    return f"{Context(prec=3, rounding=rounding).plus(Decimal(value * margin)):g}"


@lru_cache(maxsize=64)
def _node_budgets(strategy: Strategy, epsilon: Fraction, sensitivity: float) -> NodeBudgets:
    delta = sensitivity
    bound = weight_column_bound(strategy)
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
    low = ~at_most_product(losses, per_weight, weights)
    losses[low] = np.nextafter(losses[low], 0.0)
    # scales: floats with Delta <= loss_i * scale_i, exactly (rounded up, at most a few ulps)
    target = np.full_like(weights, delta)
    scales = target / losses
    for _ in range(8):
        short = ~at_most_product(target, losses, scales)
        if not short.any():
            break
        scales[short] = np.nextafter(scales[short], np.inf)
    else:
        raise BudgetError(
            f"could not round the noise scales of {strategy.mechanism}/{strategy.objective} "
            f"N={strategy.horizon} up to an exact budget (epsilon {float(epsilon)!r}, Delta "
            f"{delta!r}); this is a bug, please report it"
        )
    if not bool(np.all(at_most_product(losses, per_weight, weights))):
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
