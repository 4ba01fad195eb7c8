"""Consistent revisions from stored noisy nodes (DESIGN §4 "in the daemon"; seeds 004, 000).

Released values are noisy Fenwick nodes ``c~_i`` (shape (n, width) per epoch) with noise
variance ``v_i`` shared by every counter of the stream (one strategy for all counters). The
public constraints act on the counter axis: every period's vector lies in a subspace ``S``
(span of the combos; the census hierarchy total = sum of marginals = sum of cells). Because
the nodes 1..n of an epoch are an invertible transform of its periods 1..n, "every period in S"
is the same as "every node in S", and the weighted least-squares problem

    min sum_i (1/v_i) ||y_i - c~_i||^2   s.t.  y_i in S for every node i

separates per node into the *unweighted* orthogonal projection of ``c~_i`` onto ``S``: exact,
one pass, no iteration. A places stream with budget groups (levels with their own share of
the budget) has a diagonal covariance ``V_i`` per node instead; the problem
``min sum_i (y_i - c~_i)^T V_i^-1 (y_i - c~_i)`` still separates per node, into the GLS
projection of ``c~_i`` under ``V_i`` (the tree's two passes, weighted). Consistent running
totals are the Fenwick read-path sums of projected nodes (plus the consistent final totals
of earlier epochs); period counts are their differences. Inputs are noisy values only: this
is post-processing and spends no budget.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdp.continual import fenwick
from streamdp.engine.spec import StreamSpec

FloatArray = npt.NDArray[np.float64]


def project_nodes(
    spec: StreamSpec, values: npt.ArrayLike, group_variances: FloatArray | None = None
) -> FloatArray:
    """Project every node's counter vector onto the stream's constraint subspace.

    Args:
        spec: the stream (its counter layout and constraint kind).
        values: noisy node values, shape (n, width) in :attr:`CounterSpec.names` order.
        group_variances: a stream with budget groups: node ``i``'s noise variance in each
            group (shape (>= n, groups)); the projection of row ``i`` is then the GLS one
            under those variances. None: every counter's noise has the same variance.

    Returns:
        shape (n, width), float64; every row satisfies the constraints (the projection is the
        stream kind's, :mod:`streamdp.kinds`).
    """
    from streamdp.kinds import stream_kind

    y = np.asarray(values, dtype=np.float64)
    if spec.constraints.kind == "none" or y.shape[0] == 0:
        return y.copy()
    if group_variances is not None:
        from streamdp.kinds.base import GroupedKind

        kind = stream_kind(spec.counters.kind)
        assert isinstance(kind, GroupedKind)  # only its streams have budget groups
        return kind.project_by_group(spec, y, group_variances)
    return stream_kind(spec.counters.kind).project(spec, y)


def prefix_sums(mechanism: str, nodes: npt.ArrayLike) -> FloatArray:
    """Running totals ``s_t`` (t = 1..n) from node values, shape (n, width) -> (n, width).

    Tree strategies (fda, binary): ``s_t = y_t + s_{t & (t-1)}`` (Fenwick read path), computed
    level by level of popcount(t), vectorised; naive: the cumulative sum.
    """
    y = np.asarray(nodes, dtype=np.float64)
    if mechanism == "naive":
        out: FloatArray = np.cumsum(y, axis=0)
        return out
    return fenwick.prefix_path_sums(y)


def consistent_periods(
    spec: StreamSpec,
    values: npt.NDArray[np.int64],
    carry: FloatArray,
    *,
    first: int = 1,
    group_variances: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Consistent (period counts, running totals) of periods ``first..n`` of one epoch, each
    shape ``(n - first + 1, width)``, from the epoch's noisy node values (``values``, shape
    ``(n, width)``, node i at row i-1); the totals carry ``carry`` (the consistent final totals
    of earlier epochs).

    Only the nodes those periods read are projected: the Fenwick read paths of periods
    ``first - 1 .. n`` (O(log n) nodes each; every node 1..n for ``naive``), so a revision of a
    few new periods late in a long epoch projects a few dozen nodes, not the epoch. Each node
    is projected on its own and the read-path sums are the elementwise ``s_t = y_t +
    s_{t & (t-1)}`` (``s_0 = 0``) of :func:`prefix_sums`, so a period's values are the same
    float64 function of the noisy nodes whichever span is asked for: a revision of the new
    periods and one of the whole epoch agree bit for bit (a BLAS product over many rows may
    pick another summation order than over one).
    """
    nodes = np.asarray(values)
    n, width = nodes.shape[0], spec.counters.width
    first = max(1, first)
    if first > n:
        empty = np.zeros((0, width), dtype=np.float64)
        return empty, empty.copy()

    def projected(i: int) -> FloatArray:
        rows = None if group_variances is None else group_variances[i - 1 : i]
        row: FloatArray = project_nodes(spec, nodes[i - 1 : i], rows)[0]
        return row

    prefix: dict[int, FloatArray] = {0: np.zeros(width, dtype=np.float64)}
    if spec.mechanism == "naive":  # s_t = s_{t-1} + y_t: every node up to n, kept from first-1
        running = prefix[0]
        for t in range(1, n + 1):
            running = running + projected(t)
            if t >= first - 1:
                prefix[t] = running
    else:
        needed: set[int] = set()
        for period in range(first - 1, n + 1):
            t = period
            while t and t not in needed:
                needed.add(t)
                t &= t - 1
        for t in sorted(needed):  # a read path's parent t & (t-1) is smaller: done first
            prefix[t] = projected(t) + prefix[t & (t - 1)]
    counts = np.stack([prefix[t] - prefix[t - 1] for t in range(first, n + 1)])
    totals = np.stack([prefix[t] for t in range(first, n + 1)]) + carry
    return counts, totals


def consistent_epochs(
    spec: StreamSpec,
    epochs: list[npt.NDArray[np.int64]],
    group_variances: FloatArray | None = None,
) -> list[tuple[FloatArray, FloatArray]]:
    """Consistent (period counts, running totals) for every epoch, each shape (n_e, width).

    Args:
        spec: the stream.
        epochs: noisy node values of each epoch in order, shape (n_e, width) (node i at row
            i-1; n_e = periods closed in that epoch).
        group_variances: per node and group noise variances of a stream with budget groups
            (see :func:`project_nodes`); the same for every epoch.

    Returns:
        per epoch ``(counts, totals)``; totals include the consistent final totals of earlier
        epochs (the same carry the releases use, made consistent). Each epoch is
        :func:`consistent_periods` of all its periods.
    """
    results: list[tuple[FloatArray, FloatArray]] = []
    carry = np.zeros(spec.counters.width, dtype=np.float64)
    for values in epochs:
        counts, totals = consistent_periods(spec, values, carry, group_variances=group_variances)
        if totals.shape[0]:
            carry = totals[-1].copy()
        results.append((counts, totals))
    return results
