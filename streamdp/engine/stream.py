"""One stream's runtime: the open periods' counts, the acceptance of events into them, and
closing periods (in time, or when an operator asks) into releases.

Streams are the unit the daemon partitions by, so everything a stream needs lives here and
:meth:`StreamRuntime.state` / :meth:`StreamRuntime.restore` move one stream on its own. Its
parts: the open periods and the acceptance of events into them
(:mod:`streamdp.engine.open_periods`), the noisy nodes across epochs
(:mod:`streamdp.engine.stream_nodes`), the consistent revisions of released periods
(:mod:`streamdp.engine.stream_revisions`) and the state's JSON layout
(:mod:`streamdp.engine.stream_state`).

Protected state: the open periods' true counts (:mod:`streamdp.engine.open_periods`) and the
counter's pending raw node sums. They never leave the runtime except through :meth:`state`, which
must be stored like the input topic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank import CounterBank, open_bank
from streamdp.continual.blt_counter import BltStrategy, blt_strategy
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_gaussian import optimise_gaussian_gls
from streamdp.continual.strategy import Strategy, build_any_strategy
from streamdp.engine.budget_groups import budget_groups, open_grouped_bank
from streamdp.engine.counter_fields import CounterFields
from streamdp.engine.open_periods import OpenPeriods
from streamdp.engine.periods import PeriodClock
from streamdp.engine.records import ConsistentRecord, ReleaseRecord
from streamdp.engine.revision import project_nodes
from streamdp.engine.spec import StreamSpec
from streamdp.engine.stream_nodes import NoisyNodes
from streamdp.engine.stream_releases import release_records
from streamdp.engine.stream_revisions import RevisionStats, StreamRevisions
from streamdp.engine.stream_state import (
    StreamState,
    check_counter_parameters,
    counters_digest,
    decode_stream_state,
    encode_stream_state,
)
from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler

# (source, stream, epoch, epsilon) -> records the spend durably; raises BudgetError if capped.
SpendHook = Callable[[str, str, int, Any], object]


def stream_strategy(spec: StreamSpec) -> Strategy | KaryStrategy | BltStrategy:
    """The stream's strategy (cached: a k-ary strategy is optimised for the spec's objective
    and exact horizon once per process). Raises :class:`ConfigError` if it cannot be built."""
    if spec.mechanism == "blt":  # zCDP only (the spec refuses it otherwise)
        return blt_strategy(spec.horizon, spec.objective)
    if spec.rho is not None and spec.mechanism == "kary_gls":
        # under zCDP the level budgets are tuned for the Gaussian (variance ~ 1 / budget)
        return optimise_gaussian_gls(spec.horizon, spec.objective, spec.branching)
    return build_any_strategy(spec.mechanism, spec.objective, spec.horizon, spec.branching)


def check_releasable(spec: StreamSpec) -> None:
    """Build the stream's strategy now (a worker calls this at start, so a configuration
    error, or the k-ary optimisation's few seconds, comes before the first record)."""
    stream_strategy(spec)


class StreamRuntime:
    """Turns accepted events into period counts and closes periods into releases."""

    def __init__(
        self,
        spec: StreamSpec,
        sampler: NoiseSampler,
        spend: SpendHook,
        unit_key: bytes | None = None,
        *,
        stored_by_caller: bool = True,
    ) -> None:
        self.spec = spec
        self._fields: CounterFields | None = None
        self.sampler = sampler
        self._spend = spend
        self.clock = PeriodClock(spec.period)
        self.names = spec.counters.names
        self.width = len(self.names)
        self.horizon = spec.horizon
        self.strategy = stream_strategy(spec)
        # k-ary strategies know an epoch's noise at its start: their decoded noise is projected
        # onto the constraint span, so releases are consistent when published (P_jj scales each
        # counter's variance). Only where the exact counts always lie in that span (census
        # hierarchy; combos, every order being one combo or a sum of them): then release =
        # P (s + n), a post-processing of the noisy nodes. Projecting the noise alone while the
        # exact counts leave the span would reveal their component outside it. The places
        # tree, under decoded mechanisms, projects its releases in revisions instead
        # (post-processing of the releases).
        self._noise_ahead = isinstance(self.strategy, KaryStrategy)
        # the BLT counter draws each period's noise at its close, like a tree, but its
        # releases are decoded (not tree-path sums): they are projected and revised as the
        # k-ary ones are
        decoded = self._noise_ahead or isinstance(self.strategy, BltStrategy)
        # (every counted order lies in the combos' span, one combo or a sum of them:
        # ItemExtractor refuses the rest, so the exact counts always satisfy the constraint)
        self._projection = (
            project_nodes(spec, np.eye(self.width)) if spec.projects_at_publication else None
        )
        self.revisions = StreamRevisions(
            spec,
            self.clock,
            noise_ahead=decoded,
            project_in_revisions=(
                decoded and spec.constraints.kind != "none" and not spec.projects_at_publication
            ),
        )
        self._decoded = decoded
        self._release_scale = (
            np.sqrt(self.revisions.projection_diagonal()) if self._projection is not None else None
        )
        self.nodes = NoisyNodes(
            self._fresh_counter(),
            horizon=self.horizon,
            width=self.width,
            nodes_per_epoch=self.strategy.node_count,
            noise_ahead=self._noise_ahead,
            stored_by_caller=stored_by_caller,
        )
        # nothing stores the nodes (a file replay): past epochs retire as periods close;
        # otherwise when the caller takes them (:meth:`retire_stored`)
        self._retire_on_close = not stored_by_caller
        self.periods = OpenPeriods(spec, self.clock, unit_key)
        self._lateness = spec.allowed_lateness_seconds
        self._stop = spec.on_epoch_end == "stop"
        # periods below this index must close now (an operator's close control record)
        self._close_target = 0
        self.next_deadline = self._deadline()

    def _fresh_counter(self) -> CounterBank:
        spec = self.spec
        if budget_groups(spec):
            assert isinstance(self.strategy, Strategy)  # the spec allows fda, binary, naive
            return open_grouped_bank(spec, self.strategy, self.sampler, noise_label=spec.name)
        return open_bank(
            self.strategy,
            float(spec.epsilon),
            float(spec.noise_sensitivity),
            self.width,
            self.sampler,
            noise_label=spec.name,
            projection=self._projection,
            gaussian=(
                None if spec.rho is None else GaussianBudget(Fraction(spec.rho), spec.l2_squared)
            ),
        )

    @property
    def closed(self) -> int:
        """Absolute periods closed (over all epochs)."""
        return self.periods.closed

    @property
    def counter(self) -> CounterBank:
        """The counter of the current epoch."""
        return self.nodes.counter

    @property
    def revision(self) -> int:
        """The number of the latest consistent revision (0: none yet)."""
        return self.revisions.number

    @property
    def last_revision(self) -> RevisionStats | None:
        """Diagnostics of the latest consistent revision."""
        return self.revisions.last

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

    def backlog(self, at: float) -> int:
        """How many periods are due at public instant ``at`` and not closed yet (the periods
        whose close instant has passed; for a stream that stops, within its horizon)."""
        due = max(0, self.clock.index_of(at - self._lateness))
        if self._stop:
            due = min(due, self.horizon)
        return max(0, due - self.closed, self._close_target - self.closed)

    def set_arrival(self, now: float, *, batch: bool = False) -> None:
        """Set the acceptance window for events arriving at public instant ``now`` (see
        :meth:`OpenPeriods.set_arrival`)."""
        self.periods.set_arrival(now, batch=batch)

    def ingest(self, event: Mapping[str, Any], content_key: str, ts: float) -> None:
        """Count one decoded event with event time ``ts``; raises :class:`RejectedError` (see
        :meth:`OpenPeriods.ingest`)."""
        self.periods.ingest(event, content_key, ts)

    def adopt_stored_nodes(self, nodes: Mapping[tuple[int, int], list[int]]) -> None:
        """Noisy nodes ``(epoch, node) -> values`` found stored beyond this state (see
        :meth:`NoisyNodes.adopt_stored_nodes`)."""
        self.nodes.adopt_stored_nodes(nodes, self.closed)

    def adopt_stored_noise(self, epoch: int, node_noise: npt.ArrayLike) -> bool:
        """Node noise of ``epoch`` found stored beyond this state (see
        :meth:`NoisyNodes.adopt_stored_noise`)."""
        return self.nodes.adopt_stored_noise(epoch, node_noise)

    def epoch_noise(self) -> tuple[int, npt.NDArray[np.int64]] | None:
        """``(epoch, node noise)`` of the current epoch once drawn (see
        :meth:`NoisyNodes.epoch_noise`)."""
        return self.nodes.epoch_noise()

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

    def _release_fields(self) -> CounterFields:
        """Every counter's own optional release fields, made at the first close."""
        if self._fields is None:
            self._fields = CounterFields(self.spec)
        return self._fields

    def close_next(self) -> list[ReleaseRecord | ConsistentRecord]:
        """Close the oldest open period: spend (durably), draw its node, release every counter."""
        j = self.closed
        epoch, index = divmod(j, self.horizon)
        period = index + 1
        # the spend is durable before the noise is drawn and anything is released; if it
        # raises (cap, backend failure) nothing has changed
        self._spend(self.spec.source, self.spec.name, epoch, self.spec.budget)
        release = self.nodes.close_period(epoch, period, self.periods.counts_of(j))
        self.periods.close(j)
        out: list[ReleaseRecord | ConsistentRecord] = list(
            release_records(
                self.spec,
                self.clock,
                self.sampler,
                j,
                release,
                scale=self._release_scale,
                integral=self.nodes.counter.integral_releases,
                fields=self._release_fields(),
            )
        )
        spec = self.spec
        every = spec.consistency.every_periods
        at_end = spec.consistency.at_epoch_end
        # a k-ary stream revises at every epoch end when it revises at all: its revisions read
        # the current epoch's counter, which the next close replaces
        if (every and self.closed % every == 0) or (
            period == self.horizon and (at_end or (self._decoded and every))
        ):
            out.extend(self.revise())
        if self._retire_on_close:
            self.revisions.retire(self.nodes)
        self.next_deadline = self._deadline()
        return out

    def revise(self) -> list[ConsistentRecord]:
        """A new numbered consistent revision, publishing only the periods no earlier revision
        published (see :meth:`StreamRevisions.revise`)."""
        return self.revisions.revise(self.nodes, self.closed)

    def node_values(self) -> list[npt.NDArray[np.int64]]:
        """Stored noisy nodes of every epoch so far, each shape (n_e, width)."""
        return self.nodes.values()

    def take_new_nodes(self) -> list[tuple[int, int, list[int]]]:
        """The noisy nodes drawn since the last call (or the last :meth:`restore`), as
        ``(epoch, t, values)`` with ``t`` the node's 1-based position in its epoch, and marks
        them taken. O(nodes returned): the daemon calls this at every checkpoint and stores
        each node once (with :meth:`state` ``with_nodes=False`` for the rest of the state)."""
        return self.nodes.take_new()

    def retire_stored(self) -> list[tuple[int, int]]:
        """Drop the past epochs' nodes that were handed out and that no revision can read any
        more; ``(epoch, nodes)`` of each (see :meth:`StreamRevisions.retire`). The caller
        deletes their stored copies once a state without them is stored."""
        return self.revisions.retire(self.nodes)

    def state(
        self, *, with_seen: bool = True, with_noise: bool = True, with_nodes: bool = True
    ) -> dict[str, Any]:
        """Plain JSON-able state. Holds raw counts: protect it like the input topic. What each
        ``with_`` flag leaves out: :func:`streamdp.engine.stream_state.encode_stream_state`."""
        state = StreamState(
            stream=self.spec.name,
            closed=self.closed,
            close_target=self._close_target,
            revised_through=self.revisions.revised_through,
            revision=self.revisions.number,
            open=self.periods.counts,
            seen=self.periods.seen,
            counter=self.nodes.counter,
            past_nodes=self.nodes.past,
            retired_carry=self.revisions.retired_carry,
        )
        out = encode_stream_state(
            state,
            [] if with_nodes else self.nodes.counts(),
            with_seen=with_seen,
            with_noise=with_noise,
            with_nodes=with_nodes,
        )
        # a privacy unit's bookkeeping; its admission log goes with the seen ids (the daemon
        # stores both incrementally)
        units = self.periods.units_state(with_log=with_seen)
        if units is not None:
            out["units"] = units
        out["counters_sha256"] = self._counters_sha256
        return out

    @cached_property
    def _counters_sha256(self) -> str:
        return counters_digest(self.names)

    def unit_log(self) -> Mapping[int, Sequence[bytes]]:
        """The privacy unit's admission log by period, every period of an epoch not yet ended
        (a live view, read, never change; see :meth:`UnitBookkeeping.log`)."""
        return self.periods.unit_log()

    def seen_ids(self) -> Mapping[int, Sequence[str]]:
        """The content keys counted so far in each open period, in counting order: a live
        view, read, never change (see :meth:`OpenPeriods.seen_ids`)."""
        return self.periods.seen_ids()

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` output (no noise is drawn); raises :class:`StateError`."""
        counter = state.get("counter")
        fresh = self._fresh_counter().state(with_noise=False, with_nodes=False)
        check_counter_parameters(self.spec.name, counter, fresh)
        restored = decode_stream_state(
            state,
            self.spec,
            self.sampler,
            self._projection,
            needs_carry=not self._decoded,
            counters_sha256=self._counters_sha256,
        )
        self.nodes.restore(restored.counter, restored.past_nodes)
        self.periods.restore(restored.closed, restored.open, restored.seen)
        try:
            self.periods.restore_units(state.get("units"))
        except StateError as error:  # the bookkeeping's own words, with the stream named
            raise StateError(f"stream {self.spec.name!r}: {error}") from None
        self.revisions.restore(restored.revision, restored.revised_through, restored.retired_carry)
        self._close_target = restored.close_target
        self.next_deadline = self._deadline()
