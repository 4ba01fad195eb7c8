"""One stream's runtime: open periods, the continual counter, epochs, revisions.

Streams are the unit the daemon partitions by, so everything a stream needs lives here and
:meth:`StreamRuntime.state` / :meth:`StreamRuntime.restore` move one stream on its own.

Protected state: ``_open`` (true counts of periods not yet closed, Python ints) and the counter's
pending raw node sums. They never leave this object except through :meth:`state`, which must be
stored like the input topic.

Every mechanism runs through one :class:`~streamdp.continual.bank.CounterBank`: a Fenwick
counter (``fda``, ``binary``, ``naive``: one node drawn per period close, consistency from
revisions over the stored nodes) or a factored counter (``kary_digits``, ``kary_gls``: every
node of an epoch drawn at its first close; with constraints the decoded noise is projected onto
the constraint span, so every release is consistent when it is published and a revision
re-publishes the releases themselves, recomputed from the counter in O(periods revised)).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank import CounterBank, open_bank, restore_bank
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.strategy import Strategy, build_any_strategy
from streamdp.engine.events import Contribution, RejectedError, extractor_for
from streamdp.engine.periods import PeriodClock
from streamdp.engine.records import ConsistentRecord, ReleaseRecord
from streamdp.engine.revision import consistent_epochs, project_nodes
from streamdp.engine.spec import StreamSpec
from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler

FloatArray = npt.NDArray[np.float64]

# 2: "seen" holds content digests of the open periods' records (1: event ids) and
# "close_target" an operator's pending close; version 1 states restore (their ids stay as
# opaque entries that match no digest)
STREAM_STATE_VERSION = 2
_RESTORABLE_VERSIONS = (1, 2)

# (source, stream, epoch, epsilon) -> records the spend durably; raises BudgetError if capped.
SpendHook = Callable[[str, str, int, Any], object]


@dataclass(frozen=True)
class RevisionStats:
    """Diagnostics of the latest consistent revision (post-processing of noisy values only)."""

    iterations: int
    residual: float
    seconds: float


def stream_strategy(spec: StreamSpec) -> Strategy | KaryStrategy:
    """The stream's strategy (cached: a k-ary strategy is optimised for the spec's objective
    and exact horizon once per process). Raises :class:`ConfigError` if it cannot be built."""
    return build_any_strategy(spec.mechanism, spec.objective, spec.horizon, spec.branching)


def check_releasable(spec: StreamSpec) -> None:
    """Build the stream's strategy now (a worker calls this at start, so a configuration
    error, or the k-ary optimisation's few seconds, comes before the first record)."""
    stream_strategy(spec)


class StreamRuntime:
    """Turns accepted events into period counts and closes periods into releases."""

    def __init__(self, spec: StreamSpec, sampler: NoiseSampler, spend: SpendHook) -> None:
        self.spec = spec
        self.sampler = sampler
        self._spend = spend
        self.clock = PeriodClock(spec.period)
        self.extractor = extractor_for(spec)
        self.names = spec.counters.names
        self.width = len(self.names)
        self.horizon = spec.horizon
        self.strategy = stream_strategy(spec)
        # k-ary strategies know an epoch's noise at its start: their decoded noise is projected
        # onto the constraint span, so releases are consistent when published (P_jj scales each
        # counter's variance). Only where the exact counts always lie in that span (census
        # hierarchy; combos when every order must be a combo): then release = P (s + n), a
        # post-processing of the noisy nodes. Projecting the noise alone while the exact counts
        # leave the span would reveal their component outside it; such streams project their
        # releases in revisions instead (post-processing of the releases).
        self._noise_ahead = isinstance(self.strategy, KaryStrategy)
        constraints = spec.constraints
        exact_in_span = constraints.kind == "hierarchy" or (
            constraints.kind == "combos" and constraints.orders_must_be_combos
        )
        self._shrink: npt.NDArray[np.float64] | None = None
        self._projection = (
            project_nodes(spec, np.eye(self.width))
            if self._noise_ahead and exact_in_span
            else None
        )
        self._project_in_revisions = (
            self._noise_ahead and constraints.kind != "none" and not exact_in_span
        )
        self._release_scale = (
            np.sqrt(self._projection_diagonal()) if self._projection is not None else None
        )
        # epoch -> node noise stored before a crash lost the state that refers to it
        self._stored_noise: dict[int, npt.NDArray[np.int64]] = {}
        self.counter = self._fresh_counter()
        self.closed = 0  # absolute periods closed (over all epochs)
        self._open: dict[int, list[int]] = {}
        self._seen: dict[int, set[str]] = {}
        # the same content keys per open period in the order they were counted, so that the
        # daemon stores the new ones by position, in O(new) (see seen_ids)
        self._seen_order: dict[int, list[str]] = {}
        self._past_nodes: list[npt.NDArray[np.int64]] = []
        # node counts of the past epochs as runs [first epoch, nodes per epoch, epochs], kept
        # as epochs roll so the hot state never walks the nodes
        self._past_counts: list[list[int]] = []
        # (epoch, n): the nodes of epochs before ``epoch``, and the first ``n`` of ``epoch``,
        # were already handed out by take_new_nodes (or restored: stored already)
        self._taken = (0, 0)
        # (epoch, node) -> noisy value stored before a crash lost the step that drew it
        self._stored_nodes: dict[tuple[int, int], list[int]] = {}
        self.revision = 0
        # absolute periods below this already have their consistent values published
        self._revised_through = 0
        # (epoch, consistent total carried into it): the revisions' running carry, cached
        self._carry_cache: tuple[int, FloatArray] | None = None
        self.last_revision: RevisionStats | None = None
        self._cache = (1.0, 0.0, -1)  # [lo, hi) -> index; empty to start
        self._lateness = spec.allowed_lateness_seconds
        self._stop = spec.on_epoch_end == "stop"
        self._max_future = spec.max_future_periods
        # the acceptance window for the current arrival instant (see set_arrival): events of
        # periods below _time_lo arrived after their period's public close instant; events of
        # periods above _future_hi are too far ahead of the clock
        self._time_lo = 0
        self._future_hi: float = float("inf")
        # periods below this index must close now (an operator's close control record)
        self._close_target = 0
        self.next_deadline = self._deadline()

    def _fresh_counter(self) -> CounterBank:
        return open_bank(
            self.strategy,
            float(self.spec.epsilon),
            float(self.spec.sensitivity),
            self.width,
            self.sampler,
            noise_label=self.spec.name,
            projection=self._projection,
        )

    @property
    def finished(self) -> bool:
        """True when the stream stops at the end of its first epoch and has released it all."""
        return self._stop and self.closed >= self.horizon

    def _deadline(self) -> float:
        """The public instant at which the oldest open period must close (-inf: now)."""
        if self.finished:
            return float("inf")
        if self.closed < self._close_target:
            return float("-inf")
        return self.clock.bounds(self.closed)[1] + self._lateness

    def set_arrival(self, now: float, *, batch: bool = False) -> None:
        """Set the acceptance window for events arriving at public instant ``now``.

        Stream mode: an event of period ``j`` counts only if ``j``'s close instant (its end plus
        the allowed lateness) is after ``now``, and ``j`` is at most ``max_future_periods``
        periods after the period holding ``now``. Batch mode (a file replay): every period
        still open counts; the future limit applies against ``now`` (the replay's ``--as-of``).
        Both depend on the event and the public clock only, never on other events.
        """
        self._time_lo = 0 if batch else max(0, self.clock.index_of(now - self._lateness))
        self._future_hi = (
            self.clock.index_of(now) + self._max_future if self._max_future else float("inf")
        )

    # ------------------------------------------------------------------ ingest
    def ingest(self, event: Mapping[str, Any], content_key: str, ts: float) -> None:
        """Count one decoded event with event time ``ts``, arriving within the window of the
        last :meth:`set_arrival`; raises :class:`RejectedError`.

        ``content_key`` identifies the record's exact content (a digest of its bytes): a
        record whose content was already counted in its period is a true duplicate (a
        producer retry, a redelivery) and is refused; a different record that reuses an
        event id is a different record and counts on its own (it can never displace another).
        """
        contribution: Contribution = self.extractor.contribution(event)
        lo, hi, j = self._cache
        if not lo <= ts < hi:
            j = self.clock.index_of(ts)
            if j >= 0:
                lo, hi = self.clock.bounds(j)
                self._cache = (lo, hi, j)
        if j < 0:
            raise RejectedError("before_start", "event_time is before the stream's first period")
        if j < self.closed or j < self._time_lo:
            raise RejectedError(
                "late",
                "the record arrived after its period's public close instant (period end plus "
                "allowed_lateness) or after an operator closed the period",
            )
        if self._stop and j >= self.horizon:
            raise RejectedError(
                "after_horizon",
                f"the stream released all {self.horizon} periods of its horizon and stops "
                "(on_epoch_end = 'stop')",
            )
        if j > self._future_hi:
            raise RejectedError(
                "too_far_in_future",
                f"event_time is more than max_future_periods = {self._max_future} periods "
                "after the period of the record's arrival on the public clock",
            )
        ids = self._seen.get(j)
        if ids is None:
            ids = self._seen[j] = set()
            order = self._seen_order[j] = []
            row = self._open[j] = [0] * self.width
        else:
            if content_key in ids:
                raise RejectedError(
                    "duplicate_event",
                    "a record with exactly this content was already counted in this period",
                )
            order = self._seen_order[j]
            row = self._open[j]
        ids.add(content_key)
        order.append(content_key)
        for i, q in contribution:
            row[i] += q

    def adopt_stored_nodes(self, nodes: Mapping[tuple[int, int], list[int]]) -> None:
        """Noisy nodes ``(epoch, node) -> values`` found stored beyond this state (a crash
        after they were written, before the state that refers to them): closing their periods
        uses them instead of drawing again. Nodes of periods already closed are ignored, and so
        are a k-ary stream's (they follow from its stored epoch noise: see
        :meth:`adopt_stored_noise`)."""
        if self._noise_ahead:
            return
        for (epoch, node), values in nodes.items():
            if epoch * self.horizon + node > self.closed:
                self._stored_nodes[(epoch, node)] = list(values)

    def adopt_stored_noise(self, epoch: int, node_noise: npt.ArrayLike) -> bool:
        """Node noise of ``epoch`` found stored beyond this state (a crash after it was
        written, before the state that refers to it): the epoch uses it instead of drawing.
        Returns False, ignoring it, unless it is a whole epoch's noise (``(nodes, width)``
        integers) for an epoch whose noise this state does not hold yet."""
        noise = np.asarray(node_noise)
        shape = (self.strategy.node_count, self.width)
        if not self._noise_ahead or noise.shape != shape or noise.dtype.kind not in "iu":
            return False
        if epoch > self.counter.epoch:
            self._stored_noise[epoch] = noise.astype(np.int64)
            return True
        if epoch == self.counter.epoch and self.counter.epoch_noise() is None:
            self.counter.adopt_noise(noise)
            return True
        return False

    def epoch_noise(self) -> tuple[int, npt.NDArray[np.int64]] | None:
        """``(epoch, node noise)`` of the current epoch once drawn, for the daemon to store
        once (before anything released with it is published); None when not drawn yet or the
        mechanism draws each node at its period's close."""
        noise = self.counter.epoch_noise()
        return None if noise is None else (self.counter.epoch, noise)

    # ------------------------------------------------------------------ closing
    def close_due(
        self, now: float, max_periods: int | None = None
    ) -> list[ReleaseRecord | ConsistentRecord]:
        """Close, oldest first, every period whose public close instant (end + allowed
        lateness) is at or before ``now`` or that an operator asked to close; at most
        ``max_periods`` of them (the rest stay due: a clock jump is worked off in paced steps).
        """
        out: list[ReleaseRecord | ConsistentRecord] = []
        done = 0
        while (
            not self.finished
            and (max_periods is None or done < max_periods)
            and (
                self.closed < self._close_target
                or self.clock.bounds(self.closed)[1] + self._lateness <= now
            )
        ):
            out.extend(self.close_next())
            done += 1
        self.next_deadline = self._deadline()
        return out

    def close_through(
        self, through: float, now: float, max_periods: int | None = None
    ) -> list[ReleaseRecord | ConsistentRecord]:
        """:meth:`request_close` then :meth:`close_due`; if closing fails (a refused spend),
        the request is withdrawn too, so a failed close changes nothing."""
        target = self._close_target
        self.request_close(through)
        try:
            return self.close_due(now, max_periods)
        except BaseException:
            self._close_target = max(target, self.closed)
            self.next_deadline = self._deadline()
            raise

    def request_close(self, through: float) -> int:
        """An operator's close: every period ending at or before ``through`` closes without
        waiting for its allowed lateness (at the next :meth:`close_due`). Returns how many
        periods that adds."""
        target = max(0, self.clock.index_of(through))
        if self._stop:
            target = min(target, self.horizon)
        added = max(0, target - max(self.closed, self._close_target))
        self._close_target = max(self._close_target, target)
        self.next_deadline = self._deadline()
        return added

    def close_next(self) -> list[ReleaseRecord | ConsistentRecord]:
        """Close the oldest open period: spend (durably), draw its node, release every counter."""
        j = self.closed
        epoch, index = divmod(j, self.horizon)
        period = index + 1
        # the spend is durable before the noise is drawn and anything is released; if it
        # raises (cap, backend failure) nothing has changed
        self._spend(self.spec.source, self.spec.name, epoch, self.spec.epsilon)
        counter = self.counter
        rolled = counter.periods_closed == self.horizon
        if rolled:
            counter = counter.next_epoch()
            stored = self._stored_noise.get(counter.epoch)
            if stored is not None:
                counter.adopt_noise(stored)
        row = self._open.get(j)
        counts = np.zeros(self.width, dtype=np.int64) if row is None else np.array(row, np.int64)
        release = counter.close_period(counts, stored=self._stored_nodes.pop((epoch, period), None))
        self._stored_noise.pop(counter.epoch, None)  # in use now (kept if the close failed)
        if rolled:
            self._past_nodes.append(self.counter.noisy_nodes()[1])
            add_run(self._past_counts, self.counter.epoch, self.counter.node_count)
        self.counter = counter
        self._open.pop(j, None)
        self._seen.pop(j, None)
        self._seen_order.pop(j, None)
        self.closed = j + 1
        start, end = self.clock.bounds(j)
        start_text, end_text = self.clock.iso(start), self.clock.iso(end)
        spec = self.spec
        eps = float(spec.epsilon)
        # projected at publication: sqrt(P_jj) per counter
        count_stds = self._scaled(float(release.count_std), self._release_scale)
        total_stds = self._scaled(float(release.total_std), self._release_scale)
        name, secure = self.sampler.name, bool(self.sampler.secure)
        # integers for integer mechanisms; k-ary GLS (and any projected) releases are real
        # numbers: rounding them would change the variance they declare
        number = int if counter.integral_releases else float
        noisy_counts = release.noisy_count.tolist()
        noisy_totals = release.noisy_total.tolist()
        out: list[ReleaseRecord | ConsistentRecord] = [
            ReleaseRecord(
                stream=spec.name,
                counter=counter_name,
                epoch=epoch,
                period=period,
                period_start=start_text,
                period_end=end_text,
                noisy_count=number(noisy_counts[c]),
                noisy_total=number(noisy_totals[c]),
                count_std=count_stds[c],
                total_std=total_stds[c],
                epsilon=eps,
                sensitivity=spec.sensitivity,
                horizon=spec.horizon,
                mechanism=spec.mechanism,
                objective=spec.objective,
                noise=name,
                noise_secure=secure,
            )
            for c, counter_name in enumerate(self.names)
        ]
        every = spec.consistency.every_periods
        at_end = spec.consistency.at_epoch_end
        # a k-ary stream revises at every epoch end when it revises at all: its revisions read
        # the current epoch's counter, which the next close replaces
        if (every and self.closed % every == 0) or (
            period == self.horizon and (at_end or (self._noise_ahead and every))
        ):
            out.extend(self.revise())
        self.next_deadline = self._deadline()
        return out

    # ------------------------------------------------------------------ consistency
    def node_values(self) -> list[npt.NDArray[np.int64]]:
        """Stored noisy nodes of every epoch so far, each shape (n_e, width)."""
        current = self.counter.noisy_nodes()[1]
        return [*self._past_nodes, current]

    def take_new_nodes(self) -> list[tuple[int, int, list[int]]]:
        """The noisy nodes drawn since the last call (or the last :meth:`restore`), as
        ``(epoch, t, values)`` with ``t`` the node's 1-based position in its epoch, and marks
        them taken. O(nodes returned): the daemon calls this at every checkpoint and stores
        each node once (with :meth:`state` ``with_nodes=False`` for the rest of the state)."""
        epoch, first = self._taken
        current = self.counter.epoch
        out: list[tuple[int, int, list[int]]] = []
        oldest = current - len(self._past_nodes)
        for e in range(max(epoch, oldest), current):
            nodes = self._past_nodes[e - oldest]
            start = first if e == epoch else 0
            out += [(e, t, nodes[t - 1].tolist()) for t in range(start + 1, len(nodes) + 1)]
        start = first if epoch == current else 0
        out += [
            (current, t, values.tolist())
            for t, values in enumerate(self.counter.nodes_from(start), start=start + 1)
        ]
        self._taken = (current, self.counter.node_count)
        return out

    def node_counts(self) -> list[list[int]]:
        """Nodes per epoch as runs ``[first epoch, nodes per epoch, epochs]`` (consecutive
        epochs with as many nodes form one run), the current epoch last in a run of its own.
        O(runs): a stream that rolls regularly keeps a constant-size entry."""
        return [
            *(list(run) for run in self._past_counts),
            [self.counter.epoch, self.counter.node_count, 1],
        ]

    def revise(self) -> list[ConsistentRecord]:
        """A new numbered consistent revision over every period released so far, publishing
        only the periods no earlier revision published.

        The projection is per node and a period's consistent values depend only on the nodes
        of its own read path (and on earlier epochs' final totals), so a period's consistent
        count and total never change once computed: re-publishing them would only repeat
        identical values (issue 14 measured 788 MB of repeats for a 366-day census replay).
        """
        if self._revised_through >= self.closed:
            return []  # nothing new to publish
        self.revision += 1
        started = time.perf_counter()
        results = self._released_since_revision() if self._noise_ahead else self._from_nodes()
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
        self.last_revision = RevisionStats(
            iterations=1, residual=residual, seconds=time.perf_counter() - started
        )
        out: list[ConsistentRecord] = []
        constraint = self.spec.constraints.kind
        # exact standard deviations: every node's counter vector is projected by the same
        # symmetric idempotent P, so a consistent value's noise variance is P_jj times the
        # release's (same node noise, same linear combination); epochs add their final
        # totals' variance as carry, exactly as the releases do
        shrink = self._projection_diagonal()
        final_var = self.counter.total_variance(self.horizon)
        scale = np.sqrt(shrink)
        for epoch, offset, counts, totals in results:
            # row r of ``counts`` is period offset + r + 1 of the epoch
            first_new = self._revised_through - epoch * self.horizon
            if first_new >= offset + counts.shape[0]:
                continue  # every period of this epoch was published by an earlier revision
            count_rows = counts.tolist()
            total_rows = totals.tolist()
            for p in range(max(offset, first_new), offset + counts.shape[0]):
                start, end = self.clock.bounds(epoch * self.horizon + p)
                if self._noise_ahead:  # the release's own stds, computed as it computed them
                    count_std = math.sqrt(self.counter.count_variance(p + 1))
                    total_std = math.sqrt(
                        self.counter.total_variance(p + 1) + self.counter.carry_variance
                    )
                    count_stds = self._scaled(count_std, scale)
                    total_stds = self._scaled(total_std, scale)
                else:
                    count_stds = self._scaled_variance(
                        shrink, self.counter.count_variance(p + 1)
                    )
                    total_stds = self._scaled_variance(
                        shrink, self.counter.total_variance(p + 1) + epoch * final_var
                    )
                out.append(
                    ConsistentRecord(
                        stream=self.spec.name,
                        revision=self.revision,
                        periods_covered=self.closed,
                        epoch=epoch,
                        period=p + 1,
                        period_start=self.clock.iso(start),
                        period_end=self.clock.iso(end),
                        counts=dict(zip(self.names, count_rows[p - offset], strict=True)),
                        totals=dict(zip(self.names, total_rows[p - offset], strict=True)),
                        constraint=constraint,
                        count_std=dict(zip(self.names, count_stds, strict=True)),
                        total_std=dict(zip(self.names, total_stds, strict=True)),
                    )
                )
        self._revised_through = self.closed
        return out

    def _from_nodes(self) -> list[tuple[int, int, FloatArray, FloatArray]]:
        """Fenwick streams: ``(epoch, 0, counts, totals)`` of every epoch holding a period no
        revision published yet, projected per stored node (:func:`consistent_epochs`, one
        epoch at a time, each carrying the consistent final totals of the epochs before).
        Earlier epochs' carry comes from :meth:`_carry_into`, so a revision costs the periods
        of the epochs it publishes, not the whole history (a horizon-1 stream revises at
        every close)."""
        current = self.counter.epoch
        oldest = current - len(self._past_nodes)
        start = min(current, max(oldest, self._revised_through // self.horizon))
        carry = self._carry_into(start, oldest)
        out: list[tuple[int, int, FloatArray, FloatArray]] = []
        for epoch in range(start, current + 1):
            values = (
                self._past_nodes[epoch - oldest]
                if epoch < current
                else self.counter.noisy_nodes()[1]
            )
            counts, totals = self._consistent_epoch(values, carry)
            out.append((epoch, 0, counts, totals))
            if totals.shape[0]:
                carry = totals[-1].copy()
        return out

    def _consistent_epoch(
        self, values: npt.NDArray[np.int64], carry: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """One epoch's consistent (counts, totals), its totals carrying ``carry``."""
        ((counts, prefix),) = consistent_epochs(self.spec, [values])
        return counts, prefix + carry

    def _carry_into(self, epoch: int, oldest: int) -> FloatArray:
        """The consistent running total carried into ``epoch`` (the sum of the consistent
        final totals of the past epochs before it), cached: advancing it costs the epochs
        rolled since the last revision (recomputed from the oldest epoch after a restore)."""
        cached = self._carry_cache
        done, carry = (
            cached
            if cached is not None and oldest <= cached[0] <= epoch
            else (oldest, np.zeros(self.width, dtype=np.float64))
        )
        for past in range(done, epoch):
            _, totals = self._consistent_epoch(self._past_nodes[past - oldest], carry)
            if totals.shape[0]:
                carry = totals[-1].copy()
        self._carry_cache = (epoch, carry)
        return carry

    def _released_since_revision(self) -> list[tuple[int, int, FloatArray, FloatArray]]:
        """k-ary streams: the releases of the current epoch's periods no revision published
        yet, recomputed from the counter (they were projected when published, so they are
        the consistent values). O(periods revised x width). Periods of an earlier epoch are
        not available here: every scheduled revision includes the epoch's last period, so none
        is left unpublished, except by a stream with no revision schedule whose epoch ended
        before an on-demand revision (its releases are the consistent values)."""
        counter = self.counter
        epoch = counter.epoch
        offset = max(0, self._revised_through - epoch * self.horizon)
        counts, totals = counter.released(offset + 1)
        if self._project_in_revisions:
            counts, totals = project_nodes(self.spec, counts), project_nodes(self.spec, totals)
        return [(epoch, offset, counts, totals)]

    def _projection_diagonal(self) -> npt.NDArray[np.float64]:
        """``P_jj`` of the stream's constraint projection (1 for no constraint), cached."""
        if self._shrink is None:
            self._shrink = np.clip(np.diag(project_nodes(self.spec, np.eye(self.width))), 0, 1)
        return self._shrink

    @staticmethod
    def _scaled_variance(shrink: FloatArray, variance: float) -> list[float]:
        """Per counter ``sqrt(P_jj variance)``."""
        out: list[float] = np.sqrt(shrink * variance).tolist()
        return out

    def _scaled(self, std: float, scale: FloatArray | None) -> list[float]:
        """``std`` per counter, times ``scale`` (``sqrt(P_jj)``) when given."""
        if scale is None:
            return [std] * self.width
        out: list[float] = (std * scale).tolist()
        return out

    # ------------------------------------------------------------------ persistence
    def state(
        self, *, with_seen: bool = True, with_noise: bool = True, with_nodes: bool = True
    ) -> dict[str, Any]:
        """Plain JSON-able state. Holds raw counts: protect it like the input topic.

        With ``with_seen=False`` the event ids of the open periods are left out (the daemon
        stores them incrementally, from :meth:`seen_ids`); :meth:`restore` needs them back
        under ``"seen"``. With ``with_noise=False`` a k-ary counter's epoch noise is left out
        (the daemon stores it once per epoch, from :meth:`epoch_noise`); :meth:`restore` needs
        it back under ``counter.node_noise``. With ``with_nodes=False`` the noisy nodes
        (``past_nodes`` and the counter's ``noisy_nodes``) are left out and ``node_counts``
        (:meth:`node_counts`) says how many there are: the daemon stores each node once, from
        :meth:`take_new_nodes`; :meth:`restore` needs them back in place of ``node_counts``.
        Without nodes, seen ids and noise the state's cost does not grow with the history."""
        out: dict[str, Any] = {
            "version": STREAM_STATE_VERSION,
            "stream": self.spec.name,
            "closed": self.closed,
            "close_target": self._close_target,
            "revised_through": self._revised_through,
            "revision": self.revision,
            "open": [[j, list(row)] for j, row in sorted(self._open.items())],
            "counter": self.counter.state(with_noise=with_noise, with_nodes=with_nodes),
        }
        if with_nodes:
            out["past_nodes"] = [nodes.tolist() for nodes in self._past_nodes]
        else:
            out["node_counts"] = self.node_counts()
        if with_seen:
            out["seen"] = [[j, sorted(ids)] for j, ids in sorted(self._seen.items())]
        return out

    def seen_ids(self) -> Mapping[int, Sequence[str]]:
        """The content keys counted so far in each open period, in counting order (restored
        ones first, sorted): a live view, read, never change. Keys are only appended while a
        period is open, and a period's entry goes when it closes, so a reader that stored the
        first ``n`` of a period stores ``ids[n:]`` next: O(new keys), however busy the period."""
        return self._seen_order

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` output (no noise is drawn)."""
        try:
            if (
                state.get("version") not in _RESTORABLE_VERSIONS
                or state.get("stream") != self.spec.name
            ):
                raise StateError(
                    f"state is for stream {state.get('stream')!r} version "
                    f"{state.get('version')!r}; expected {self.spec.name!r} version "
                    f"{STREAM_STATE_VERSION}"
                )
            counter = restore_bank(
                dict(state["counter"]), self.sampler, projection=self._projection
            )
            open_ = {int(j): [int(v) for v in row] for j, row in state["open"]}
            seen = {int(j): {str(i) for i in ids} for j, ids in state["seen"]}
            past = [
                np.asarray(n, dtype=np.int64).reshape(-1, self.width) for n in state["past_nodes"]
            ]
            closed = int(state["closed"])
            close_target = int(state.get("close_target", 0))
            revised_through = int(state.get("revised_through", 0))
            revision = int(state["revision"])
        except StateError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(
                f"stream {self.spec.name!r}: snapshot state is malformed ({type(error).__name__})"
            ) from None
        if any(len(row) != self.width for row in open_.values()) or set(open_) != set(seen):
            raise StateError(f"stream {self.spec.name!r}: open-period state has the wrong shape")
        if counter.width != self.width or counter.horizon != self.horizon:
            raise StateError(f"stream {self.spec.name!r}: counter state does not match the spec")
        if counter.epoch * self.horizon + counter.periods_closed != closed:
            raise StateError(f"stream {self.spec.name!r}: closed-period count is inconsistent")
        if counter.epoch_noise() is None and counter.epoch in self._stored_noise:
            counter.adopt_noise(self._stored_noise.pop(counter.epoch))
        self.counter = counter
        self._open, self._seen, self._past_nodes = open_, seen, past
        self._seen_order = {j: sorted(ids) for j, ids in seen.items()}
        self._past_counts = []
        oldest = counter.epoch - len(past)
        for offset, nodes in enumerate(past):
            add_run(self._past_counts, oldest + offset, int(nodes.shape[0]))
        self._taken = (counter.epoch, counter.node_count)  # restored nodes are stored already
        self.closed, self.revision = closed, revision
        self._close_target = close_target
        self._revised_through = revised_through
        self._carry_cache = None
        self._cache = (1.0, 0.0, -1)
        self.next_deadline = self._deadline()


def add_run(runs: list[list[int]], epoch: int, n: int) -> None:
    """Append ``epoch`` with ``n`` nodes to runs ``[first epoch, nodes per epoch, epochs]``
    (extending the last run when it is the epoch before with as many nodes)."""
    if runs and runs[-1][1] == n and runs[-1][0] + runs[-1][2] == epoch:
        runs[-1][2] += 1
    else:
        runs.append([epoch, n, 1])
