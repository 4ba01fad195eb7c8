"""One stream's numbered consistent revisions of its released periods (post-processing of
noisy values only: no budget is spent).

A Fenwick stream (``fda``, ``binary``, ``naive``) revises by projecting the stored nodes its
new periods read (:func:`~streamdp.engine.revision.consistent_periods`); a k-ary stream
(``kary_digits``, ``kary_gls``) re-publishes its releases, recomputed from the counter, which
were projected when published (or are projected here when its exact counts may leave the
constraint span). Each
period is published by one revision only: its consistent values never change once computed,
and an epoch's nodes are dropped once no revision can read them (:meth:`StreamRevisions.retire`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdp.consistency.nonnegative import TopDownIntegers
from streamdp.continual.factored_noise import project_rows
from streamdp.continual.grouped_bank import GroupedBank
from streamdp.engine.counter_values import CounterValues
from streamdp.engine.grouped_variances import GroupedVariances
from streamdp.engine.periods import PeriodClock
from streamdp.engine.records import ConsistentRecord
from streamdp.engine.revision import consistent_periods, project_nodes
from streamdp.engine.spec import StreamSpec
from streamdp.engine.stream_nodes import NoisyNodes
from streamdp.engine.stream_releases import scaled_stds

FloatArray = npt.NDArray[np.float64]


#: The most bytes of counter entries one consistent record may hold: its maps (counts, totals
#: and their stds, and the non-negative integer estimates when published) stay well under
#: Kafka's default 1 MB request limit.
MAX_PART_BYTES = 400_000
#: What one counter's entry in one map may take besides its name: the quotes, colon and comma,
#: and a float's shortest repr (at most 24 characters).
_ENTRY_OVERHEAD = 28


def counter_parts(names: tuple[str, ...], maps: int = 4) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` ranges of the counters, each part's entries in its ``maps``
    maps at most :data:`MAX_PART_BYTES` (a function of the public names only); one range for a
    stream whose records fit whole."""
    parts: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, name in enumerate(names):
        entry = maps * (len(name.encode()) + _ENTRY_OVERHEAD)
        if i > start and size + entry > MAX_PART_BYTES:
            parts.append((start, i))
            start, size = i, 0
        size += entry
    parts.append((start, len(names)))
    return parts


@dataclass(frozen=True)
class RevisionStats:
    """Diagnostics of the latest consistent revision (post-processing of noisy values only)."""

    residual: float
    seconds: float


def nonnegative_estimator(spec: StreamSpec) -> TopDownIntegers | None:
    """The stream's non-negative integer estimator (``consistency.nonnegative_integers``, a
    places stream on its tree), or None."""
    places = spec.counters.places
    if not spec.consistency.nonnegative_integers or places is None:
        return None
    return TopDownIntegers(places.tree, spec.counters.width // places.size)


def _named(
    names: tuple[str, ...], row: npt.NDArray[np.int64] | None, lo: int, hi: int
) -> CounterValues[int] | None:
    """Counters ``lo..hi-1`` of ``row`` by name (None: not published)."""
    return None if row is None else CounterValues(names, row, lo, hi)


def _scaled_variance(shrink: FloatArray, variance: float | FloatArray) -> FloatArray:
    """Per counter ``sqrt(P_jj variance)``."""
    out: FloatArray = np.sqrt(shrink * variance)
    return out


class StreamRevisions:
    """The revision number, the periods already published consistent, and the carry cache."""

    def __init__(
        self,
        spec: StreamSpec,
        clock: PeriodClock,
        *,
        noise_ahead: bool,
        project_in_revisions: bool,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.names = spec.counters.names
        self.width = len(self.names)
        # opt-in non-negative integer estimates (places streams): two more maps per record
        self._nonnegative = nonnegative_estimator(spec)
        self._parts = counter_parts(self.names, 4 if self._nonnegative is None else 6)
        self.horizon = spec.horizon
        self._noise_ahead = noise_ahead
        self._project_in_revisions = project_in_revisions
        self._shrink: FloatArray | None = None
        self._projection: FloatArray | None = None
        # a stream with budget groups: node noise variances per level, (horizon, levels)
        self._group_variances: FloatArray | None = None
        self.number = 0
        # absolute periods below this already have their consistent values published
        self.revised_through = 0
        # (epoch, consistent total carried into it): the revisions' running carry, cached
        self._carry_cache: tuple[int, FloatArray] | None = None
        # the carry into the oldest epoch whose nodes are held, once earlier ones were retired
        # (None: none retired); stored with the state, so a restore carries the same bits
        self.retired_carry: tuple[int, FloatArray] | None = None
        self.last: RevisionStats | None = None

    def restore(
        self,
        number: int,
        revised_through: int,
        retired_carry: tuple[int, FloatArray] | None = None,
    ) -> None:
        """Continue from a restored state (the carry cache is rebuilt on demand, from
        ``retired_carry`` when earlier epochs were retired)."""
        self.number = number
        self.revised_through = revised_through
        self.retired_carry = retired_carry
        self._carry_cache = None

    def retire(self, nodes: NoisyNodes) -> list[tuple[int, int]]:
        """Drop the nodes of the past epochs no revision can read any more; returns
        ``(epoch, nodes)`` of each dropped (see :meth:`NoisyNodes.retire_before`).

        A decoded stream's revisions read only the current epoch, so every past epoch goes. A
        Fenwick stream's revisions read an epoch's nodes until a revision has published its
        last period; the consistent total carried past the dropped epochs is kept (and
        stored), so later revisions compute the same bits as if the nodes were still held.
        A stream that never revises on a schedule keeps its nodes for an on-demand revision.
        """
        current = nodes.counter.epoch
        wanted = current if self._noise_ahead else self.revised_through // self.horizon
        through = nodes.retirable_through(wanted)
        oldest = nodes.oldest_epoch
        if through <= oldest:
            return []
        if not self._noise_ahead:
            self._grouped(nodes.counter)  # the projection weights, before any epoch is projected
            carry = self._carry_into(through, oldest, nodes.past)
            self.retired_carry = (through, carry.copy())
        return nodes.retire_before(through)

    def revise(self, nodes: NoisyNodes, closed: int) -> list[ConsistentRecord]:
        """A new numbered consistent revision over every period released so far (``closed``
        absolute periods), publishing only the periods no earlier revision published.

        The projection is per node and a period's consistent values depend only on the nodes
        of its own read path (and on earlier epochs' final totals), so a period's consistent
        count and total never change once computed: re-publishing them would only repeat
        identical values (issue 14 measured 788 MB of repeats for a 366-day census replay).
        """
        if self.revised_through >= closed:
            return []  # nothing new to publish
        self.number += 1
        started = time.perf_counter()
        counter = nodes.counter
        grouped = self._grouped(counter)
        results = (
            self._released_since_revision(nodes) if self._noise_ahead else self._from_nodes(nodes)
        )
        # diagnostics (noisy-derived only): the exact per-node projection is one pass; the
        # residual is how far the newest period counts and running totals of each epoch revised
        # are from the constraint subspace (O(width) per epoch: the cost does not double)
        residual = 0.0
        for _, _, counts, totals in results:
            if counts.shape[0]:
                last = np.vstack([counts[-1:], totals[-1:]])
                residual = max(
                    residual, float(np.max(np.abs(project_nodes(self.spec, last) - last)))
                )
        self.last = RevisionStats(residual=residual, seconds=time.perf_counter() - started)
        out: list[ConsistentRecord] = []
        constraint = self.spec.constraints.kind
        # exact standard deviations: every node's counter vector is projected by the same
        # symmetric idempotent P, so a consistent value's noise variance is P_jj times the
        # release's (same node noise, same linear combination); epochs add their final
        # totals' variance as carry, exactly as the releases do
        shrink = self.projection_diagonal()
        final_var = (
            counter.total_variance(self.horizon) if grouped is None else grouped.total(self.horizon)
        )
        scale = np.sqrt(shrink)
        for epoch, offset, counts, totals in results:
            # row r of ``counts`` is period offset + r + 1 of the epoch
            first_new = self.revised_through - epoch * self.horizon
            if first_new >= offset + counts.shape[0]:
                continue  # every period of this epoch was published by an earlier revision
            first = max(offset, first_new)
            integers = self._nonnegative_rows(
                counts[first - offset :],
                totals[first - offset :],
                first_period=epoch * self.horizon + first,
            )
            for p in range(first, offset + counts.shape[0]):
                start, end = self.clock.bounds(epoch * self.horizon + p)
                if grouped is not None:  # each group's own variances, projected per node
                    count_std_row = np.sqrt(grouped.count(p + 1))
                    total_std_row = np.sqrt(grouped.total(p + 1) + epoch * final_var)
                elif self._noise_ahead:  # the release's own stds, computed as it computed them
                    count_std = counter.count_std(p + 1)
                    total_std = counter.total_std(p + 1)
                    count_std_row = np.asarray(scaled_stds(count_std, scale, self.width))
                    total_std_row = np.asarray(scaled_stds(total_std, scale, self.width))
                else:
                    count_std_row = _scaled_variance(shrink, counter.count_variance(p + 1))
                    total_std_row = _scaled_variance(
                        shrink, counter.total_variance(p + 1) + epoch * final_var
                    )
                # each part's maps are views over these rows (no per-counter Python objects
                # until a record is serialised: a wide stream's revision holds millions)
                counts_row, totals_row = counts[p - offset].copy(), totals[p - offset].copy()
                integer_counts, integer_totals = integers[p - first]
                names = self.names
                for part, (lo, hi) in enumerate(self._parts, start=1):
                    out.append(
                        ConsistentRecord(
                            stream=self.spec.name,
                            revision=self.number,
                            periods_covered=closed,
                            epoch=epoch,
                            period=p + 1,
                            period_start=self.clock.iso(start),
                            period_end=self.clock.iso(end),
                            counts=CounterValues(names, counts_row, lo, hi),
                            totals=CounterValues(names, totals_row, lo, hi),
                            constraint=constraint,
                            count_std=CounterValues(names, count_std_row, lo, hi),
                            total_std=CounterValues(names, total_std_row, lo, hi),
                            part=part,
                            parts=len(self._parts),
                            nonnegative_counts=_named(names, integer_counts, lo, hi),
                            nonnegative_totals=_named(names, integer_totals, lo, hi),
                        )
                    )
        self.revised_through = closed
        return out

    def _nonnegative_rows(
        self, counts: FloatArray, totals: FloatArray, *, first_period: int
    ) -> list[tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]]:
        """Per row, the non-negative integer estimates of the consistent counts and totals
        (computed from exactly the published values; ties between siblings broken by keys of
        the row's absolute period, ``first_period`` for the first row, public), or
        ``(None, None)`` when the stream does not publish them."""
        if self._nonnegative is None:
            return [(None, None)] * counts.shape[0]
        salts = np.arange(first_period, first_period + counts.shape[0], dtype=np.int64)
        return list(
            zip(
                list(self._nonnegative(counts, salts)),
                list(self._nonnegative(totals, salts)),
                strict=True,
            )
        )

    def _from_nodes(self, nodes: NoisyNodes) -> list[tuple[int, int, FloatArray, FloatArray]]:
        """Fenwick streams: ``(epoch, offset, counts, totals)`` of every epoch holding a period
        no revision published yet, for those periods only (row r is period offset + r + 1),
        each epoch carrying the consistent final totals of the epochs before. Only the nodes
        on the new periods' read paths are projected (:func:`consistent_periods`), and earlier
        epochs' carry comes from :meth:`_carry_into`, so a revision costs the periods it
        publishes, not the epoch so far nor the whole history (a horizon-1 stream revises at
        every close; a daily stream revising weekly projects a few dozen nodes in December)."""
        current = nodes.counter.epoch
        past = nodes.past
        oldest = current - len(past)
        start = min(current, max(oldest, self.revised_through // self.horizon))
        carry = self._carry_into(start, oldest, past)
        out: list[tuple[int, int, FloatArray, FloatArray]] = []
        for epoch in range(start, current + 1):
            values = past[epoch - oldest] if epoch < current else nodes.counter.noisy_nodes()[1]
            offset = max(0, self.revised_through - epoch * self.horizon)
            counts, totals = self._consistent(values, carry, first=offset + 1)
            out.append((epoch, offset, counts, totals))
            if epoch < current:  # a past epoch is complete: its last row is its final total
                carry = totals[-1].copy()
        if nodes.counter.periods_closed == self.horizon:  # the current epoch is complete
            self._carry_cache = (current + 1, out[-1][3][-1].copy())
        return out

    def _consistent(
        self, values: npt.NDArray[np.int64], carry: FloatArray, *, first: int
    ) -> tuple[FloatArray, FloatArray]:
        """One epoch's consistent (counts, totals) of periods ``first..``, carrying ``carry``."""
        return consistent_periods(
            self.spec, values, carry, first=first, group_variances=self._group_variances
        )

    def _carry_into(self, epoch: int, oldest: int, past: list[npt.NDArray[np.int64]]) -> FloatArray:
        """The consistent running total carried into ``epoch`` (the sum of the consistent
        final totals of the past epochs before it), cached: advancing it costs the epochs
        rolled since the last revision, each the read path of its last period (recomputed
        from the oldest epoch after a restore)."""
        cached = self._carry_cache
        if cached is None or not oldest <= cached[0] <= epoch:
            # the carry kept for the oldest epoch held (its epoch checked when read back)
            cached = self.retired_carry or (oldest, np.zeros(self.width, dtype=np.float64))
        done, carry = cached
        for earlier in range(done, epoch):
            values = past[earlier - oldest]
            _, totals = self._consistent(values, carry, first=values.shape[0])
            if totals.shape[0]:
                carry = totals[-1].copy()
        self._carry_cache = (epoch, carry)
        return carry

    def _grouped(self, counter: object) -> GroupedVariances | None:
        """A grouped stream's variances (None for others), and its node noise variances per
        level kept for the projection (:meth:`_consistent`); the same in every epoch.
        Set before any epoch is projected: a revision, or a retirement's carry (after a
        restore, one may come before the other)."""
        grouped = GroupedVariances(self.spec, counter) if isinstance(counter, GroupedBank) else None
        self._group_variances = None if grouped is None else grouped.group_variances
        return grouped

    def _released_since_revision(
        self, nodes: NoisyNodes
    ) -> list[tuple[int, int, FloatArray, FloatArray]]:
        """k-ary streams: the releases of the current epoch's periods no revision published
        yet, recomputed from the counter (they were projected when published, so they are
        the consistent values). O(periods revised x width). Periods of an earlier epoch are
        not available here: every scheduled revision includes the epoch's last period, so none
        is left unpublished, except by a stream with no revision schedule whose epoch ended
        before an on-demand revision (its releases are the consistent values)."""
        counter = nodes.counter
        epoch = counter.epoch
        offset = max(0, self.revised_through - epoch * self.horizon)
        counts, totals = counter.released(offset + 1)
        if self._project_in_revisions:
            # in one fixed order per row (project_rows): a revision re-published after a
            # restart, or made with more periods, gives each period the same bits
            projection = self.projection_matrix()
            counts, totals = project_rows(counts, projection), project_rows(totals, projection)
        return [(epoch, offset, counts, totals)]

    def projection_matrix(self) -> FloatArray:
        """The stream's constraint projection ``P`` (the identity for no constraint), cached."""
        if self._projection is None:
            self._projection = project_nodes(self.spec, np.eye(self.width))
        return self._projection

    def projection_diagonal(self) -> FloatArray:
        """``P_jj`` of the stream's constraint projection (1 for no constraint), cached; from
        the kind (:meth:`~streamdp.kinds.base.StreamKind.projection_diagonal`), which never
        forms the dense matrix where the stream is large."""
        if self._shrink is None:
            from streamdp.kinds import stream_kind

            diagonal = stream_kind(self.spec.counters.kind).projection_diagonal(self.spec)
            self._shrink = np.clip(diagonal, 0, 1)
        return self._shrink
