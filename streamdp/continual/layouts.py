"""How the nodes of a one-node-per-period strategy cover periods and combine into releases.

Two layouts: :data:`FENWICK` (the Fenwick tree of DESIGN §3: node ``i`` covers
``i - lowbit(i) + 1 .. i``; ``fda`` and ``binary``) and :data:`SINGLETONS` (node ``i`` is
period ``i`` alone; ``naive``). A :class:`streamdp.continual.strategy.Strategy` holds one of
them, so no code branches on a mechanism's name. Node indices and periods are 1-based; node
arrays have shape ``(N, ...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from streamdp.continual import fenwick

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Layout(Protocol):
    """How nodes of a one-node-per-period strategy cover periods and combine into totals."""

    def read_path(self, t: int) -> list[int]: ...

    def covering_nodes(self, p: int, horizon: int) -> list[int]: ...

    def children(self, t: int) -> list[int]: ...

    def parent(self, j: int, horizon: int) -> int | None: ...

    def interval(self, i: int) -> tuple[int, int]: ...

    def path_sums(self, values: FloatArray) -> FloatArray: ...

    def total_variance(self, node_var: FloatArray, t: int) -> float: ...

    def count_variances(self, node_var: FloatArray) -> FloatArray: ...

    def count_variance(self, node_var: FloatArray, t: int) -> float: ...

    def next_total(self, noisy: Sequence[IntArray], t: int, previous: IntArray) -> IntArray: ...


class FenwickLayout:
    """Fenwick tree (DESIGN §3): node ``i`` covers ``i - lowbit(i) + 1 .. i``."""

    def read_path(self, t: int) -> list[int]:
        return fenwick.read_path(t)

    def covering_nodes(self, p: int, horizon: int) -> list[int]:
        return fenwick.update_chain(p, horizon)

    def children(self, t: int) -> list[int]:
        return fenwick.children(t)

    def parent(self, j: int, horizon: int) -> int | None:
        up = fenwick.parent(j)
        return up if up <= horizon else None

    def interval(self, i: int) -> tuple[int, int]:
        return fenwick.interval(i)

    def path_sums(self, values: FloatArray) -> FloatArray:
        return fenwick.prefix_path_sums(values)

    def total_variance(self, node_var: FloatArray, t: int) -> float:
        return float(sum(node_var[i - 1] for i in fenwick.read_path(t)))

    def count_variances(self, node_var: FloatArray) -> FloatArray:
        # the paths of t and t-1 share the path of t - lowbit(t); the rest differs
        v = np.asarray(node_var, dtype=np.float64)
        T = np.concatenate([[0.0], fenwick.prefix_path_sums(v)])
        t = np.arange(1, v.shape[0] + 1, dtype=np.int64)
        out: FloatArray = v + T[t - 1] - T[t & (t - 1)]
        return out

    def count_variance(self, node_var: FloatArray, t: int) -> float:
        return (
            float(node_var[t - 1])
            + self.total_variance(node_var, t - 1)
            - self.total_variance(node_var, t & (t - 1))
        )

    def next_total(self, noisy: Sequence[IntArray], t: int, previous: IntArray) -> IntArray:
        total = np.zeros_like(previous)
        for i in fenwick.read_path(t):
            total += noisy[i - 1]
        return total


class SingletonLayout:
    """Naive: node ``i`` is period ``i`` alone; the running total sums nodes ``1..t``."""

    def read_path(self, t: int) -> list[int]:
        return list(range(t, 0, -1))

    def covering_nodes(self, p: int, horizon: int) -> list[int]:  # noqa: ARG002
        return [p]

    def children(self, t: int) -> list[int]:  # noqa: ARG002
        return []

    def parent(self, j: int, horizon: int) -> int | None:  # noqa: ARG002
        return None

    def interval(self, i: int) -> tuple[int, int]:
        return i, i

    def path_sums(self, values: FloatArray) -> FloatArray:
        out: FloatArray = np.cumsum(np.asarray(values, dtype=np.float64), axis=0)
        return out

    def total_variance(self, node_var: FloatArray, t: int) -> float:
        # the read path is nodes 1..t: the same sum as path_sums, whatever the node variances
        return float(np.sum(np.asarray(node_var[:t], dtype=np.float64)))

    def count_variances(self, node_var: FloatArray) -> FloatArray:
        out: FloatArray = np.asarray(node_var, dtype=np.float64).copy()
        return out

    def count_variance(self, node_var: FloatArray, t: int) -> float:
        return float(node_var[t - 1])

    def next_total(self, noisy: Sequence[IntArray], t: int, previous: IntArray) -> IntArray:
        return previous + noisy[t - 1]


FENWICK: Layout = FenwickLayout()
SINGLETONS: Layout = SingletonLayout()
