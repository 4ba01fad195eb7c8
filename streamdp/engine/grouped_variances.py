"""Exact noise variances of the consistent values of a stream with budget groups (a places
stream's levels or a census stream's total, marginals and cells with their own share of the
budget: :mod:`streamdp.engine.budget_groups`).

Node ``i`` of every group has its own noise variance (the same strategy, a different scale per
group), so its projection onto the constraints is the GLS one under those variances and its
projected variances are the kind's closed form (the tree's two passes,
:func:`~streamdp.consistency.tree.tree_projection_variances`; the census ANOVA eigenvalues,
:func:`~streamdp.consistency.census.census_projected_variances`). Nodes are independent: a
period's consistent running total has the sum of its read path's projected variances; its
count, the sum over the nodes on exactly one of the read paths of ``t`` and ``t - 1``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.continual.grouped_bank import GroupedBank
from streamdp.engine.spec import StreamSpec

FloatArray = npt.NDArray[np.float64]


class GroupedVariances:
    """Per counter variances of one grouped stream's consistent nodes, totals and counts."""

    def __init__(self, spec: StreamSpec, bank: GroupedBank) -> None:
        self.spec = spec
        #: node noise variance of every node of an epoch in every group, (horizon, groups)
        self.group_variances = bank.group_node_variances()
        self._layout = bank.groups[0][2].strategy.layout
        self._groups = bank.groups
        self._nodes: dict[int, FloatArray] = {}

    def node(self, i: int) -> FloatArray:
        """Noise variance of every counter of node ``i`` (1-based) after the projection
        (before it, for a stream without constraints), shape (width,); cached."""
        cached = self._nodes.get(i)
        if cached is not None:
            return cached
        row = self.group_variances[i - 1 : i]
        if self.spec.constraints.kind == "none":
            value: FloatArray = np.empty(self.spec.counters.width)
            for g, (start, stop, _) in enumerate(self._groups):
                value[start:stop] = row[0, g]
        else:
            from streamdp.kinds import stream_kind
            from streamdp.kinds.base import GroupedKind

            kind = stream_kind(self.spec.counters.kind)
            assert isinstance(kind, GroupedKind)  # only its streams have budget groups
            value = kind.projected_variances_by_group(self.spec, row)[0]
        self._nodes[i] = value
        return value

    def total(self, t: int) -> FloatArray:
        """``Var`` of every counter's consistent running total of period ``t`` of an epoch
        (carry excluded); zeros for ``t = 0``."""
        out = np.zeros(self.spec.counters.width)
        if t:
            for i in self._layout.read_path(t):
                out += self.node(i)
        return out

    def count(self, t: int) -> FloatArray:
        """``Var`` of every counter's consistent count of period ``t`` of an epoch."""
        upper = set(self._layout.read_path(t))
        lower = set(self._layout.read_path(t - 1)) if t > 1 else set()
        out = np.zeros(self.spec.counters.width)
        for i in sorted(upper ^ lower):
            out += self.node(i)
        return out
