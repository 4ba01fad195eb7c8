"""A stream's budget groups (issue 29; seed 002's heterogeneous allocation): the counters a
reader cares about most get a larger share of the stream's epsilon (or rho), so less noise,
and the others more. The groups are the kind's (:class:`~streamdp.kinds.base.GroupedKind`):

- a places stream with ``level_weights``: one group per level (its places x every cell);
- a census stream with ``attribute_weights``: the total, each attribute's marginal, the cells.

One event adds at most one increment to every group (exactly one, except in the levels below a
places stream's shallower leaves, which an event there does not reach), so with ``G`` groups
each holds ``1 / G`` of its contribution bound. Group ``g`` receives share ``w_g / sum(w)`` of
the budget; its node noise is calibrated on those two alone:

- pure DP: ``epsilon_g = epsilon w_g / sum(w)`` rounded down to a float and
  ``Delta_g = Delta / G`` rounded up, then the node scales ``Delta_g / (epsilon_g lambda_i)``
  rounded up as for any counter; the groups' losses add up to at most epsilon;
- zCDP: ``rho_g = rho w_g / sum(w)`` exactly and the squared L2 bound ``ceil(L2^2 / G)``.

Equal weights give the scales of the stream without weights (to the last rounding). Revisions
weight each counter by its own node variance (:meth:`~streamdp.kinds.base.GroupedKind.
project_by_group`, :mod:`streamdp.engine.grouped_variances`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from streamdp.continual.counter import ContinualCounter
from streamdp.continual.exact_float import float_at_least, float_at_most
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.grouped_bank import GroupedBank
from streamdp.continual.strategy import Strategy, build_strategy
from streamdp.engine.spec import StreamSpec
from streamdp.errors import ConfigError
from streamdp.noise.sampler import NoiseSampler

#: Mechanisms a stream with budget groups runs: one node per period, consistency by revisions.
GROUPED_MECHANISMS = ("fda", "binary", "naive")


@dataclass(frozen=True)
class BudgetGroup:
    """Counters ``[start, stop)`` with ``share`` of the stream's budget (epsilon or rho) and
    ``contribution``, the part of one event's (or unit's) contribution bound they hold."""

    name: str
    start: int
    stop: int
    share: Fraction
    contribution: Fraction


def budget_groups(spec: StreamSpec) -> tuple[BudgetGroup, ...]:
    """The stream's budget groups in counter order (its kind's
    :meth:`~streamdp.kinds.base.GroupedKind.budget_group_ranges`, each with its weight's share);
    empty for a stream without weights."""
    from streamdp.kinds import stream_kind
    from streamdp.kinds.base import GroupedKind

    kind = stream_kind(spec.counters.kind)
    if not isinstance(kind, GroupedKind):
        return ()
    ranges = kind.budget_group_ranges(spec.counters)
    if not ranges:
        return ()
    exact = [Fraction(w) for w in kind.group_weights(spec.counters)]
    total = sum(exact, Fraction(0))
    return tuple(
        BudgetGroup(
            name=name,
            start=start,
            stop=stop,
            share=weight / total,
            contribution=Fraction(1, len(ranges)),
        )
        for (name, start, stop), weight in zip(ranges, exact, strict=True)
    )


def group_epsilon(spec: StreamSpec, group: BudgetGroup) -> float:
    """The group's epsilon, rounded down to a float (pure DP)."""
    return float_at_most(Fraction(spec.epsilon) * group.share)


def group_sensitivity(spec: StreamSpec, group: BudgetGroup) -> float:
    """The group's L1 contribution bound, rounded up to a float (pure DP)."""
    return float_at_least(spec.noise_sensitivity * group.contribution)


def group_gaussian(spec: StreamSpec, group: BudgetGroup) -> GaussianBudget:
    """The group's zCDP budget: its exact share of rho, its part of the squared L2 bound
    (rounded up to an integer)."""
    assert spec.rho is not None
    l2_squared = math.ceil(spec.l2_squared * group.contribution)
    return GaussianBudget(Fraction(spec.rho) * group.share, l2_squared)


def open_grouped_bank(
    spec: StreamSpec, strategy: Strategy, sampler: NoiseSampler, *, noise_label: str = ""
) -> GroupedBank:
    """A fresh epoch-0 bank of the stream's budget groups (each group's noise labelled by
    ``noise_label`` and its name)."""
    counters: list[tuple[int, int, ContinualCounter]] = []
    for group in budget_groups(spec):
        label = f"{noise_label}|{group.name}" if noise_label else ""
        if spec.rho is None:
            counter = ContinualCounter(
                strategy,
                group_epsilon(spec, group),
                group_sensitivity(spec, group),
                group.stop - group.start,
                sampler,
                noise_label=label,
            )
        else:
            counter = ContinualCounter(
                strategy,
                float(spec.epsilon),
                float(spec.noise_sensitivity),
                group.stop - group.start,
                sampler,
                noise_label=label,
                gaussian=group_gaussian(spec, group),
            )
        counters.append((group.start, group.stop, counter))
    return GroupedBank(counters)


def check_budget_groups(spec: StreamSpec) -> None:
    """:class:`ConfigError` unless the stream's mechanism runs grouped and every group's
    node noise stays in the sampler's safe range."""
    if not budget_groups(spec):
        return
    if spec.mechanism not in GROUPED_MECHANISMS:
        raise ConfigError(
            f"budget weights run with mechanism {', '.join(GROUPED_MECHANISMS)} (one node per "
            f"period, consistency by revisions), not {spec.mechanism!r}"
        )
    from streamdp.noise.insecure import InsecureSeededSampler

    for group in budget_groups(spec):
        if spec.rho is None and group_epsilon(spec, group) <= 0:
            share = f"{float(group.share):.3g}" if float(group.share) else "below 1e-308"
            raise ConfigError(
                f"budget group {group.name!r} gets the share {share} of epsilon {spec.epsilon}, "
                "which is 0 as a float: its noise could not be drawn; raise its weight against "
                "the others"
            )
    strategy = build_strategy(spec.mechanism, spec.objective, spec.horizon)
    try:
        open_grouped_bank(spec, strategy, InsecureSeededSampler(0))  # draws nothing
    except ConfigError as error:
        raise ConfigError(f"with the budget weights given, {error}") from None
