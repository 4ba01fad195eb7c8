"""A bank whose counters are split into budget groups (issue 29; seed 002's heterogeneous
allocation): contiguous ranges of the counter vector, each a
:class:`~streamdp.continual.counter.ContinualCounter` of its own with its own share of the
stream's budget and its own part of one event's contribution.

Privacy: the groups hold disjoint counters, so one event's loss is the sum of the groups'
losses (sequential composition). Group ``g`` with share ``w_g`` of epsilon (or rho) and
contribution bound ``Delta_g`` is ``w_g epsilon``-DP (``w_g rho``-zCDP) in that event's
contribution to it; shares adding up to at most one spend the stream's budget at most once.
Every group runs the same strategy (same nodes, same node weights): only the noise scales
differ, so a node's variance differs by group (:meth:`GroupedBank.group_node_variances`).

Only one-node-per-period counters (``fda``, ``binary``, ``naive``) are grouped: their
consistency comes from revisions, which weight each group by its own variance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter import ContinualCounter
from streamdp.continual.counter_checks import int_vector
from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

STATE_KIND = "grouped"
STATE_VERSION = 1


@dataclass(frozen=True)
class GroupedRelease:
    """One period close of every group: arrays of shape ``(width,)`` in counter order; the
    standard deviations per counter (each its group's, exact)."""

    epoch: int
    period: int
    noisy_count: Int64Array
    noisy_total: Int64Array
    count_std: FloatArray
    total_std: FloatArray


class GroupedBank:
    """Counters ``[start, stop)`` of each group run by that group's own counter."""

    #: releases are integers (sums of integer node values)
    integral_releases = True

    def __init__(self, groups: Sequence[tuple[int, int, ContinualCounter]]) -> None:
        if not groups:
            raise StateError("a grouped bank needs at least one group")
        expected = 0
        first = groups[0][2]
        for start, stop, counter in groups:
            if start != expected or stop <= start or counter.width != stop - start:
                raise StateError(
                    f"budget groups must tile the counters in order: got [{start}, {stop}) "
                    f"with {counter.width} counters after {expected}"
                )
            if (counter.epoch, counter.periods_closed, counter.horizon) != (
                first.epoch,
                first.periods_closed,
                first.horizon,
            ):
                raise StateError("the budget groups of a bank are at different periods")
            expected = stop
        self.groups = [(int(a), int(b), c) for a, b, c in groups]
        self.width = expected
        self._sizes = np.array([b - a for a, b, _ in self.groups], dtype=np.int64)

    # ------------------------------------------------------------------ read-only views
    @property
    def epoch(self) -> int:
        return self.groups[0][2].epoch

    @property
    def carry_variance(self) -> float:
        """The largest group's carried variance (per counter: :meth:`total_variance`)."""
        return max(c.carry_variance for _, _, c in self.groups)

    @property
    def horizon(self) -> int:
        return self.groups[0][2].horizon

    @property
    def periods_closed(self) -> int:
        return self.groups[0][2].periods_closed

    @property
    def node_count(self) -> int:
        return self.groups[0][2].node_count

    def per_counter(self, per_group: Sequence[float]) -> FloatArray:
        """A value per group spread over its counters, shape ``(width,)``."""
        return np.repeat(np.asarray(per_group, dtype=np.float64), self._sizes)

    def group_node_variances(self) -> FloatArray:
        """Exact noise variance of every node of an epoch in every group, shape
        ``(horizon, groups)`` (the same for every epoch: the scales are fixed)."""
        columns = [c.node_variances for _, _, c in self.groups]
        return np.stack(columns, axis=1)

    def total_variance(self, t: int) -> FloatArray:
        """``Var(s~_t)`` of each counter (carry excluded), shape ``(width,)``."""
        return self.per_counter([c.total_variance(t) for _, _, c in self.groups])

    def count_variance(self, t: int) -> FloatArray:
        return self.per_counter([c.count_variance(t) for _, _, c in self.groups])

    def count_std(self, t: int) -> FloatArray:
        return self.per_counter([c.count_std(t) for _, _, c in self.groups])

    def total_std(self, t: int) -> FloatArray:
        return self.per_counter([c.total_std(t) for _, _, c in self.groups])

    # ------------------------------------------------------------------ releasing
    def close_period(
        self, counts: npt.NDArray[np.int64], *, stored: Any | None = None
    ) -> GroupedRelease:
        """Close the next period of every group (see
        :meth:`ContinualCounter.close_period`). Every group's noise is drawn before any group
        closes, so the bank is unchanged if anything raises."""
        a = int_vector(counts, self.width, "counts")
        kept = None if stored is None else int_vector(stored, self.width, "stored noisy node")
        if kept is None:
            drawn = [c.draw_next() for _, _, c in self.groups]
            releases = [
                c.close_period(a[start:stop], noise=noise)
                for (start, stop, c), noise in zip(self.groups, drawn, strict=True)
            ]
        else:
            releases = [c.close_period(a[s:e], stored=kept[s:e]) for s, e, c in self.groups]
        return GroupedRelease(
            epoch=releases[0].epoch,
            period=releases[0].period,
            noisy_count=np.concatenate([r.noisy_count for r in releases]),
            noisy_total=np.concatenate([r.noisy_total for r in releases]),
            count_std=self.per_counter([r.count_std for r in releases]),
            total_std=self.per_counter([r.total_std for r in releases]),
        )

    def next_epoch(self) -> GroupedBank:
        return GroupedBank([(s, e, c.next_epoch()) for s, e, c in self.groups])

    def noisy_nodes(self) -> tuple[Int64Array, Int64Array, FloatArray]:
        """``(indices (n,), noisy values (n, width), noise variances (n, width))``."""
        parts = [c.noisy_nodes() for _, _, c in self.groups]
        variances = np.hstack(
            [
                np.repeat(v[:, None], e - s, axis=1)
                for (s, e, _), (_, _, v) in zip(self.groups, parts, strict=True)
            ]
        )
        return parts[0][0], np.hstack([values for _, values, _ in parts]), variances

    def nodes_from(self, first: int) -> list[Int64Array]:
        columns = [c.nodes_from(first) for _, _, c in self.groups]
        return [np.concatenate(row) for row in zip(*columns, strict=True)]

    def released(self, first: int) -> tuple[Int64Array, Int64Array]:
        parts = [c.released(first) for _, _, c in self.groups]
        return (
            np.hstack([counts for counts, _ in parts]),
            np.hstack([totals for _, totals in parts]),
        )

    # ------------------------------------------------------------------ persistence
    def epoch_noise(self) -> Int64Array | None:
        """None: every group draws each node's noise when its period closes."""
        return None

    def adopt_noise(self, node_noise: Any) -> None:  # noqa: ARG002 - the bank interface
        raise StateError(
            "a grouped bank draws each node when its period closes and holds no epoch noise "
            "to adopt; pass stored nodes to close_period(stored=...)"
        )

    def state(self, *, with_noise: bool = True, with_nodes: bool = True) -> dict[str, Any]:
        """Plain state: the epoch, every group's counter state with its range, and (with
        ``with_nodes``) the noisy nodes as whole counter vectors, like the other counters'
        ``noisy_nodes`` (the daemon stores and restores them the same way). Protect it like
        the input data: it holds raw partial sums."""
        out: dict[str, Any] = {
            "kind": STATE_KIND,
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "groups": [
                {"start": s, "stop": e, "counter": c.state(with_noise=with_noise, with_nodes=False)}
                for s, e, c in self.groups
            ],
        }
        if with_nodes:
            out["noisy_nodes"] = [row.tolist() for row in self.nodes_from(0)]
        return out

    @classmethod
    def from_state(cls, state: dict[str, Any], sampler: NoiseSampler) -> GroupedBank:
        """Restore :meth:`state` (written with its nodes, or given them back under
        ``noisy_nodes``) without drawing; :class:`StateError` if malformed."""
        if state.get("kind") != STATE_KIND or state.get("version") != STATE_VERSION:
            raise StateError(
                f"not a grouped bank state of version {STATE_VERSION} "
                f"(kind={state.get('kind')!r}, version={state.get('version')!r})"
            )
        groups = state.get("groups")
        nodes = state.get("noisy_nodes")
        if not isinstance(groups, list) or not groups or not isinstance(nodes, list):
            raise StateError("a grouped bank state needs its groups and its noisy nodes")
        restored: list[tuple[int, int, ContinualCounter]] = []
        for index, group in enumerate(groups):
            # the messages name the group by position only: a group's counter state holds raw
            # partial sums, and a StateError's text reaches the worker's log
            try:
                start, stop = group["start"], group["stop"]
                counter = dict(group["counter"])
            except (KeyError, TypeError, ValueError):
                raise StateError(
                    f"budget group {index} of the state is malformed (it needs start, stop "
                    "and counter)"
                ) from None
            if not isinstance(start, int) or not isinstance(stop, int):
                raise StateError(f"budget group {index}'s start and stop must be integers")
            try:
                counter["noisy_nodes"] = [list(row)[start:stop] for row in nodes]
            except TypeError:
                raise StateError("the grouped bank's noisy nodes are malformed") from None
            restored.append((start, stop, ContinualCounter.from_state(counter, sampler)))
        bank = cls(restored)
        if bank.epoch != state.get("epoch") or any(len(row) != bank.width for row in nodes):
            raise StateError("the grouped bank's epoch or node widths disagree with its groups")
        return bank
