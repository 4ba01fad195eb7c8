"""What an engine step changed: the one record a checkpoint persists (issue 15).

:meth:`Engine.take_changes <streamdp.engine.engine.Engine.take_changes>` returns a
:class:`ChangeSet` holding everything that changed since the previous take and must be stored
before anything it produced is published: the noisy nodes drawn, a k-ary epoch's noise drawn,
the event ids counted per open (stream, period), the periods that closed (their ids may be
dropped), the ledger spends recorded, the hot state (the engine snapshot without nodes, ids or
noise: its size does not grow with the history) and the outputs, already split by kind where
they were made. The daemon lays a change set out in its state table
(:mod:`streamdp.daemon.checkpoint_writer`); nothing else in it reaches into the engine.

:class:`ChangeTracker` is the engine's bookkeeping of what it has handed out: every method is
O(what changed), never O(history). A restored engine counts what it restored as stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streamdp.engine.records import ConsistentRecord, DeadLetterRecord, ReleaseRecord
from streamdp.engine.stream_revisions import RevisionStats

NodeKey = tuple[str, int, int]  # (stream, epoch, t) with t the 1-based node index in its epoch
PeriodKey = tuple[str, int]  # (stream, period index)
OutputRecord = ReleaseRecord | ConsistentRecord | DeadLetterRecord


@dataclass(frozen=True)
class Spend:
    """One budget spend the ledger recorded: ``stream`` spends ``epsilon`` of ``source`` in
    ``epoch``."""

    source: str
    stream: str
    epoch: int
    epsilon: Decimal


@dataclass(frozen=True)
class EpochNoise:
    """A k-ary stream's node noise for one epoch, ``(nodes, width)`` integers: stored once,
    before anything released with it is published."""

    stream: str
    epoch: int
    noise: npt.NDArray[np.int64]


@dataclass(frozen=True)
class ChangeSet:
    """Everything a checkpoint must store since the previous :meth:`Engine.take_changes`.

    ``new_nodes``: noisy nodes drawn, ``(stream, epoch, t) -> values``, in key order (nodes
    adopted from storage after a crash are left out: they are stored already).
    ``new_noise``: k-ary epoch noise drawn (or handed out again), by stream name.
    ``open_periods``: every open (stream, period) in counting order; ``new_ids`` the content
    keys each one counted since the previous take (only those that counted some).
    ``closed_periods``: periods whose ids were handed out and that are closed now.
    ``periods_closed``: per stream, how many periods are closed (periods ``j`` below it are).
    ``unit_periods``: every (stream, period) with a privacy-unit admission log (the periods of
    epochs not yet ended); ``new_units`` the unit digests each one admitted since the previous
    take (only those that admitted some); ``ended_unit_periods``: periods whose log was handed
    out and whose epoch has ended (their log may be dropped).
    ``retired_nodes``: ``(stream, epoch, nodes)`` of the past epochs whose nodes the engine
    dropped (no revision reads them): their stored copies may be deleted once ``hot_state``,
    which no longer refers to them, is stored.
    ``ledger_spends``: budget spends recorded (they are also in ``hot_state``'s ledger runs).
    ``hot_state``: :meth:`Engine.snapshot` without seen ids, epoch noise or nodes.
    ``outputs``: every output record in the order it was made (what the outbox holds);
    ``releases``/``revisions``/``dead_letters``: the same records by kind.
    ``revision_stats``: per stream that made revisions, the diagnostics of its latest one.
    """

    hot_state: dict[str, Any]
    new_nodes: Mapping[NodeKey, list[int]] = field(default_factory=dict)
    new_noise: tuple[EpochNoise, ...] = ()
    open_periods: tuple[PeriodKey, ...] = ()
    new_ids: Mapping[PeriodKey, Sequence[str]] = field(default_factory=dict)
    closed_periods: tuple[PeriodKey, ...] = ()
    periods_closed: Mapping[str, int] = field(default_factory=dict)
    unit_periods: tuple[PeriodKey, ...] = ()
    new_units: Mapping[PeriodKey, Sequence[bytes]] = field(default_factory=dict)
    ended_unit_periods: tuple[PeriodKey, ...] = ()
    retired_nodes: tuple[tuple[str, int, int], ...] = ()
    # records each stream dropped beyond its privacy unit's bounds since the previous take
    # (an input count: protected metrics only)
    unit_drops: Mapping[str, int] = field(default_factory=dict)
    ledger_spends: tuple[Spend, ...] = ()
    outputs: tuple[OutputRecord, ...] = ()
    releases: tuple[ReleaseRecord, ...] = ()
    revisions: tuple[ConsistentRecord, ...] = ()
    dead_letters: tuple[DeadLetterRecord, ...] = ()
    revision_stats: Mapping[str, RevisionStats] = field(default_factory=dict)


class TrackedStream(Protocol):
    """What the tracker reads of a stream runtime."""

    @property
    def closed(self) -> int: ...

    def take_new_nodes(self) -> list[tuple[int, int, list[int]]]: ...

    def retire_stored(self) -> list[tuple[int, int]]: ...

    def epoch_noise(self) -> tuple[int, npt.NDArray[np.int64]] | None: ...

    def seen_ids(self) -> Mapping[int, Sequence[str]]: ...

    def unit_log(self) -> Mapping[int, Sequence[bytes]]: ...

    @property
    def last_revision(self) -> RevisionStats | None: ...


class ChangeTracker:
    """What an engine has handed out in change sets, and the outputs and spends since the last
    take (kept only when ``record_outputs``: an engine whose caller publishes what each call
    returns, like a file replay, would otherwise hold every release in memory)."""

    def __init__(self, *, record_outputs: bool = False) -> None:
        self.record_outputs = record_outputs
        self._outputs: list[OutputRecord] = []
        self._releases: list[ReleaseRecord] = []
        self._revisions: list[ConsistentRecord] = []
        self._dead_letters: list[DeadLetterRecord] = []
        self._ledger: list[Spend] = []
        self._adopted_nodes: set[NodeKey] = set()
        self._noise_taken: set[tuple[str, int]] = set()
        self._ids_taken: dict[PeriodKey, int] = {}
        self._units_taken: dict[PeriodKey, int] = {}

    # ------------------------------------------------------------------ recording
    def release(self, record: ReleaseRecord) -> None:
        self._outputs.append(record)
        self._releases.append(record)

    def revision(self, record: ConsistentRecord) -> None:
        self._outputs.append(record)
        self._revisions.append(record)

    def dead_letter(self, record: DeadLetterRecord) -> None:
        self._outputs.append(record)
        self._dead_letters.append(record)

    def spend(self, spend: Spend) -> None:
        self._ledger.append(spend)

    def adopted_nodes(self, keys: Iterable[NodeKey]) -> None:
        """Nodes found stored (a crash lost the state referring to them): never handed out."""
        self._adopted_nodes.update(keys)

    def adopted_noise(self, stream: str, epoch: int) -> None:
        """Epoch noise found stored: never handed out."""
        self._noise_taken.add((stream, epoch))

    def restored(self, streams: Mapping[str, TrackedStream]) -> None:
        """After a restore: what the engine now holds was stored (its nodes are marked taken
        by the streams themselves)."""
        self._noise_taken = set()
        self._ids_taken = {}
        self._units_taken = {}
        for name, runtime in streams.items():
            for period, log in runtime.unit_log().items():
                self._units_taken[(name, period)] = len(log)
            drawn = runtime.epoch_noise()
            if drawn is not None:
                self._noise_taken.add((name, drawn[0]))
            for period, ids in runtime.seen_ids().items():
                self._ids_taken[(name, period)] = len(ids)

    def hand_out_again(
        self,
        *,
        ids_of: Iterable[str] = (),
        noise_of: Iterable[str] = (),
        units_of: Iterable[str] = (),
    ) -> None:
        """The open periods' ids of streams ``ids_of`` (the epoch noise of ``noise_of``, the
        privacy-unit admission logs of ``units_of``) were restored from a layout that kept them
        inside the hot state: the next take hands them out whole, to be stored on their own."""
        id_streams, noise_streams, unit_streams = set(ids_of), set(noise_of), set(units_of)
        self._ids_taken = {k: n for k, n in self._ids_taken.items() if k[0] not in id_streams}
        self._noise_taken = {k for k in self._noise_taken if k[0] not in noise_streams}
        self._units_taken = {k: n for k, n in self._units_taken.items() if k[0] not in unit_streams}

    def drop_outputs(self) -> None:
        """Forget the outputs and spends recorded since the last take."""
        self._outputs, self._releases, self._revisions, self._dead_letters = [], [], [], []
        self._ledger = []

    # ------------------------------------------------------------------ taking
    def take(
        self,
        streams: Mapping[str, TrackedStream],
        snapshot: Callable[[], dict[str, Any]],
        unit_drops: Mapping[str, int] | None = None,
    ) -> ChangeSet:
        """The change set since the previous take; marks everything in it taken. The nodes
        are handed out first, then the streams retire the past epochs no revision reads, and
        ``snapshot()`` makes the hot state last (it refers only to the nodes still held).
        ``unit_drops``: the records dropped beyond privacy-unit bounds since then."""
        nodes: dict[NodeKey, list[int]] = {}
        for name, runtime in streams.items():
            for epoch, t, values in runtime.take_new_nodes():
                node = (name, epoch, t)
                if node in self._adopted_nodes:
                    self._adopted_nodes.discard(node)  # stored before the crash, same value
                    continue
                nodes[node] = values
        # an epoch retired here may hold nodes handed out just above: they are still written
        # (before the outbox records that used them), and deleted after the hot state
        retired = tuple(
            (name, epoch, n)
            for name, runtime in streams.items()
            for epoch, n in runtime.retire_stored()
        )
        hot_state = snapshot()
        noise: list[EpochNoise] = []
        for name in sorted(streams):
            drawn = streams[name].epoch_noise()
            if drawn is None or (name, drawn[0]) in self._noise_taken:
                continue
            epoch = drawn[0]
            self._noise_taken = {(s, e) for s, e in self._noise_taken if s != name or e > epoch}
            self._noise_taken.add((name, epoch))
            noise.append(EpochNoise(name, epoch, drawn[1]))
        open_periods: list[PeriodKey] = []
        new_ids: dict[PeriodKey, Sequence[str]] = {}
        for name, runtime in streams.items():
            for period, ids in runtime.seen_ids().items():
                key = (name, period)
                open_periods.append(key)
                taken = self._ids_taken.get(key, 0)
                if len(ids) != taken:  # ids are only appended while a period is open
                    new_ids[key] = ids[taken:]
                    self._ids_taken[key] = len(ids)
        still_open = set(open_periods)
        closed = tuple(k for k in self._ids_taken if k not in still_open)
        for period_key in closed:
            del self._ids_taken[period_key]
        unit_periods, new_units, ended = self._take_units(streams)
        revision_stats: dict[str, RevisionStats] = {}
        for record in self._revisions:
            stats = streams[record.stream].last_revision
            if stats is not None:
                revision_stats[record.stream] = stats
        changes = ChangeSet(
            hot_state=hot_state,
            new_nodes=dict(sorted(nodes.items())),
            new_noise=tuple(noise),
            open_periods=tuple(open_periods),
            new_ids=new_ids,
            closed_periods=closed,
            periods_closed={name: runtime.closed for name, runtime in streams.items()},
            unit_periods=unit_periods,
            new_units=new_units,
            ended_unit_periods=ended,
            retired_nodes=retired,
            unit_drops=dict(unit_drops or {}),
            ledger_spends=tuple(self._ledger),
            outputs=tuple(self._outputs),
            releases=tuple(self._releases),
            revisions=tuple(self._revisions),
            dead_letters=tuple(self._dead_letters),
            revision_stats=revision_stats,
        )
        self.drop_outputs()
        return changes

    def _take_units(
        self, streams: Mapping[str, TrackedStream]
    ) -> tuple[tuple[PeriodKey, ...], dict[PeriodKey, Sequence[bytes]], tuple[PeriodKey, ...]]:
        """The privacy-unit logs' periods, their admissions since the previous take, and the
        periods whose epoch ended since (see :class:`ChangeSet`); O(what changed)."""
        periods: list[PeriodKey] = []
        new: dict[PeriodKey, Sequence[bytes]] = {}
        for name, runtime in streams.items():
            for period, log in runtime.unit_log().items():
                key = (name, period)
                periods.append(key)
                taken = self._units_taken.get(key, 0)
                if len(log) != taken:  # appended only while the period's epoch lasts
                    new[key] = log[taken:]
                    self._units_taken[key] = len(log)
        current = set(periods)
        ended = tuple(k for k in self._units_taken if k not in current)
        for key in ended:
            del self._units_taken[key]
        return tuple(periods), new, ended
