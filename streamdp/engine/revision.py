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
        epochs (the same carry the releases use, made consistent).
    """
    results: list[tuple[FloatArray, FloatArray]] = []
    carry = np.zeros(spec.counters.width, dtype=np.float64)
    for values in epochs:
        projected = project_nodes(spec, values, group_variances)
        prefix = prefix_sums(spec.mechanism, projected)
        counts = np.diff(prefix, axis=0, prepend=np.zeros((1, prefix.shape[1])))
        totals = prefix + carry
        if prefix.shape[0]:
            carry = totals[-1].copy()
        results.append((counts, totals))
    return results
