"""The input-stall watchdog: exit (to restart from the last checkpoint) when an input partition
has records the consumer could fetch but none arrived for ``--stall-exit`` seconds, or its
committed offset stayed behind durable records that long (``CommitStallWatch``).

The decision per partition is :class:`~streamdp.daemon.stall_watch.InputStallWatch`'s; this
module feeds it from the running worker: which partitions are assigned, how far each is done
(the larger of the next offset to process and the committed offset), what the client sees of
it (``faust_internals.fetch_view``), and whether the worker is blocked for a reason that is not
a stall (stopping, joining the group, a checkpoint under way).

Two cases the client's view alone would hide:

* a partition no fetch has answered for has no known end (aiokafka learns it from fetch
  responses): the check asks the broker for it (Faust's ``highwaters``), so a partition the
  consumer never fetches is seen to have records it does not read;
* a checkpoint under way blocks only while it is the same one as at the previous check: a
  worker that made batches durable since then is busy, not blocked, and a partition it leaves
  behind all that while is starved (a check that happened to fall inside one of many short
  checkpoints would otherwise restart its clock every time);
* the commit check reads the committed offsets from the broker (the ones a next owner resumes
  from and the group's lag is measured against), not faust-streaming's record of its own
  commits, which can run ahead of the broker (``faust_internals.honest_commits`` closes the
  two ways known; one seen diverging is logged).

Each question to the broker goes through the consumer's thread and is waited for at most
``PROBE_TIMEOUT_SECONDS``; while one is unanswered no other of its kind is asked (a broker that
does not answer would otherwise fill the thread's queue), and the check decides without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import replace
from typing import Any, Generic, TypeVar

from faust.types import TP

from streamdp.daemon.fatal import worker_stopping
from streamdp.daemon.observation import InputProgress
from streamdp.daemon.partition_view import PartitionView, with_broker_commit, with_end
from streamdp.daemon.runtime import WorkerRuntime
from streamdp.daemon.stall_watch import CommitStallWatch
from streamdp.errors import EXIT_INPUT_GAP
from streamdp.faust_internals import broker_committed_offsets, committed_offset, fetch_view

log = logging.getLogger("streamdp.daemon")
__all__ = ["PROBE_TIMEOUT_SECONDS", "StallWatchdog", "watchdog_interval"]

#: how long a check waits for an answer of the broker (end or committed offsets)
PROBE_TIMEOUT_SECONDS = 5.0

Answer = TypeVar("Answer")


class _BrokerQuestion(Generic[Answer]):
    """One kind of question to the broker, at most one out at a time: :meth:`ask` waits
    ``PROBE_TIMEOUT_SECONDS`` for the answer and returns None without one (no answer, an error,
    or the previous question still out); an answer that comes later is dropped."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._out: asyncio.Future[Answer] | None = None

    async def ask(self, question: Callable[[], Awaitable[Answer]]) -> Answer | None:
        if self._out is not None and not self._out.done():
            return None
        out = self._out = asyncio.ensure_future(question())
        out.add_done_callback(self._settled)
        done, _ = await asyncio.wait({out}, timeout=PROBE_TIMEOUT_SECONDS)
        if not done or out.cancelled() or out.exception() is not None:
            return None
        return out.result()

    def _settled(self, out: asyncio.Future[Answer]) -> None:
        if not out.cancelled() and out.exception() is not None:  # retrieved: no asyncio warning
            log.debug("%s unavailable: %r", self._what, out.exception())


def watchdog_interval(stall_seconds: float) -> float:
    """Seconds between two checks: a quarter of the stall limit, within 0.5-5 s."""
    return max(0.5, min(5.0, stall_seconds / 4))


class StallWatchdog:
    """Checks every assigned input partition of the worker ``app`` once per :meth:`check`."""

    def __init__(
        self,
        app: Any,
        runtime: WorkerRuntime,
        progress: InputProgress,
        input_names: Collection[str],
        changelog_topic: str,
    ) -> None:
        self._app = app
        self._runtime = runtime
        self._progress = progress
        self._input_names = input_names
        self._changelog_topic = changelog_topic
        self._commit_watch = CommitStallWatch(progress.stall_watch.stall_seconds)
        self._batches_at_last_check = runtime.batches
        self._end_question: _BrokerQuestion[Any] = _BrokerQuestion(
            "end offsets of unfetched input partitions"
        )
        self._commit_question: _BrokerQuestion[dict[Any, int]] = _BrokerQuestion(
            "the broker's committed input offsets"
        )
        self._on_broker: dict[tuple[str, int], int] = {}  # its last answers, for the dump
        self._diverged: set[tuple[str, int]] = set()  # record ahead of the broker, logged
        # for the dump: how many checks ran, when the last one did and what it could see
        self._checks = 0
        self._generation: object = None  # the group generation of the last check
        self._last_check: tuple[float, str] | None = None

    def _blocked(self) -> str | None:
        """Why the worker cannot take records now for a reason that is not a stall (stopping,
        joining the group, a checkpoint under way), or None."""
        app = self._app
        runtime = self._runtime
        if worker_stopping(app):
            return "stopping"
        if bool(getattr(app, "rebalancing", False)) and not self._recovering():
            return "joining the group"
        in_flight = runtime.in_flight
        if runtime.lock.locked() or (in_flight is not None and not in_flight.done()):
            if runtime.batches != self._batches_at_last_check:
                # busy, not blocked: batches became durable since the previous check, so a
                # partition left behind meanwhile is starved, and its clock runs
                return None
            return "a checkpoint under way"
        return None

    def _shows_offsets(self) -> bool:
        """Whether log lines may show input offsets: they count a partition's records (input
        volume), which only ``--input-volume-metrics`` lets out of the worker; without it the
        logs stay a public surface (README, "Trust zones") and say how offsets relate only."""
        return bool(self._runtime.settings.metrics_input_volume)

    def _recovering(self) -> bool:
        return bool(getattr(self._app, "in_recovery", False))

    def _partitions(self) -> Iterator[PartitionView]:
        """Each assigned input partition as the watchdog sees it now."""
        consumer = self._app.consumer
        next_offset = self._progress.next_offset
        recovering = self._recovering()
        for tp in list(consumer.assignment()):
            if tp.topic not in self._input_names:
                continue
            restoring_from = (
                fetch_view(consumer, TP(self._changelog_topic, tp.partition))
                if recovering
                else None
            )
            yield PartitionView(
                tp.topic,
                tp.partition,
                fetch_view(consumer, tp),
                processed=next_offset.get((tp.topic, tp.partition), 0),
                committed=committed_offset(consumer, tp),
                waits_for_changelog=(
                    restoring_from is not None and not restoring_from.leader_reachable
                ),
                on_broker=self._on_broker.get((tp.topic, tp.partition)),
                diverged=(tp.topic, tp.partition) in self._diverged,
            )

    def describe(self) -> list[str]:
        """One line per assigned input partition: what :meth:`check` decides from (for the
        diagnostic dump, ``streamdp.daemon.diagnostics``)."""
        blocked = self._blocked()
        offsets = self._shows_offsets()
        now = time.monotonic()
        lines = [
            f"{p.topic}[{p.partition}]: {p.summary(offsets=offsets)}{self._clocks(p, now)}"
            for p in self._partitions()
        ]
        if self._last_check is None:
            checks = "no check yet"
        else:
            at, outcome = self._last_check
            checks = f"{self._checks} checks, the last {now - at:.1f} s ago ({outcome})"
        state = f"stall clocks paused: {blocked}" if blocked else "stall clocks run"
        return [*lines, f"{state}; {checks}"]

    def _clocks(self, partition: PartitionView, now: float) -> str:
        """The partition's stall clocks that run, for :meth:`describe` (seconds only)."""
        key = (partition.topic, partition.partition)
        running = [
            (name, watch.running_for(key, now))
            for name, watch in (
                ("input", self._progress.stall_watch),
                ("commit", self._commit_watch),
            )
        ]
        shown = [
            f"{name} clock {seconds:.1f} s" for name, seconds in running if seconds is not None
        ]
        return f"; {', '.join(shown)}" if shown else ""

    async def check(self) -> None:
        """Exit with ``EXIT_INPUT_GAP`` if a partition stalled; return otherwise."""
        # only a partition the consumer could fetch counts (streamdp.daemon.batch_input.
        # InputStallWatch): not while the worker joins the group, a checkpoint is being
        # written, or the partition's leader (in a table recovery: its changelog
        # partition's leader) is down or unknown. A recovery that stalls with its leaders
        # up still counts: a restart clears faust-streaming's stuck recoveries
        stall_watch = self._progress.stall_watch
        now = time.monotonic()
        reason = self._blocked()
        blocked = reason is not None
        partitions = list(self._partitions())
        assigned = {(p.topic, p.partition) for p in partitions}
        stall_watch.keep_only(assigned)
        generation = getattr(self._app, "consumer_generation_id", None)
        if generation != self._generation:  # a new assignment: committed offsets start afresh
            self._generation = generation
            self._commit_watch.keep_only(())
        self._commit_watch.keep_only(assigned)
        partitions = [replace(p, on_broker=None) for p in partitions]  # this check's answer
        self._on_broker = {k: v for k, v in self._on_broker.items() if k in assigned}
        self._diverged &= assigned
        self._checks += 1
        outcome = f"blocked: {reason}" if blocked else "no input partition"
        if not blocked and partitions:
            partitions = await self._with_broker_answers(partitions)
            answered = any(p.on_broker is not None for p in partitions)
            # the worker may have begun to stop or to rebalance while the broker answered
            reason = self._blocked()
            blocked = reason is not None
            outcome = (
                f"blocked after asking the broker: {reason}"
                if blocked
                else "the broker answered"
                if answered
                else "no answer of the broker"
            )
        self._last_check = (now, outcome)
        # from here, "blocked by a checkpoint" means the same one as now (see _blocked)
        self._batches_at_last_check = self._runtime.batches
        for partition in partitions:
            key = (partition.topic, partition.partition)
            view = partition.view
            done = partition.done
            waited = stall_watch.check(
                key, view, done, blocked=blocked or partition.waits_for_changelog, now=now
            )
            if waited is not None and view is not None and view.end is not None:
                fetched = view.fetched is not None and view.fetched > done
                where = (
                    f"up to offset {view.end - 1} but none from {done}"
                    if self._shows_offsets()
                    else "past the last durable one but none"
                )
                await self._exit_to_restart(
                    "input %s[%d] has records %s arrived for %.0f s while they could be "
                    "fetched (%s)",
                    key[0], key[1], where, waited,
                    "fetched and never delivered: faust-streaming dropped a fetch"
                    if fetched else f"leader node {view.leader} reachable, none fetched",
                )  # fmt: skip
            self._note_divergence(partition)
            processed, committed = partition.processed, partition.resumes_from
            stuck = self._commit_watch.check(key, processed, committed, blocked=blocked, now=now)
            if stuck is not None:
                where = (
                    f"records up to offset {processed - 1} are durable but the "
                    f"committed offset stayed at {committed}"
                    if self._shows_offsets()
                    else "records are durable past the committed offset, which stayed"
                )
                await self._exit_to_restart(
                    "input %s[%d]: %s for %.0f s (%s)",
                    key[0], key[1], where, stuck,
                    "the consumer's commits stopped or fell behind"
                    if partition.on_broker is None or partition.committed <= partition.on_broker
                    else "on the broker; faust-streaming's record of its commits is further",
                )  # fmt: skip

    def _note_divergence(self, partition: PartitionView) -> None:
        """Log once (until it resolves) a partition whose committed offset on the broker is
        behind faust-streaming's record of its commits: the record took a commit the broker
        did not (the watchdog's commit check reads the broker's, so it still exits 75)."""
        key = (partition.topic, partition.partition)
        if partition.on_broker is None:
            return
        if partition.on_broker >= partition.committed:
            self._diverged.discard(key)
            return
        if key in self._diverged:
            return
        self._diverged.add(key)
        if self._shows_offsets():
            offsets = f" ({partition.on_broker} < {partition.committed})"
        else:
            offsets = ""
        log.warning(
            "input %s[%d]: the broker's committed offset is behind faust-streaming's record "
            "of its commits%s",
            key[0], key[1], offsets,
        )  # fmt: skip

    async def _with_broker_answers(self, partitions: list[PartitionView]) -> list[PartitionView]:
        """``partitions`` with what the broker answered this check: each one's committed offset,
        and the end of each one the client knows none of (no fetch of it answered: a partition
        the consumer never fetches)."""
        consumer = self._app.consumer
        tps = [TP(p.topic, p.partition) for p in partitions]
        committed = await self._commit_question.ask(lambda: broker_committed_offsets(consumer, tps))
        if committed is not None:
            partitions = [with_broker_commit(p, committed) for p in partitions]
            self._on_broker = {
                (p.topic, p.partition): p.on_broker for p in partitions if p.on_broker is not None
            }
        unknown = [TP(p.topic, p.partition) for p in partitions if p.view and p.view.end is None]
        if unknown:
            ends = await self._end_question.ask(lambda: consumer.highwaters(*unknown))
            if ends is not None:
                partitions = [with_end(p, ends.get(TP(p.topic, p.partition))) for p in partitions]
        return partitions

    async def _exit_to_restart(self, message: str, *args: object) -> None:
        """Log ``message`` at CRITICAL and exit 75 (under the lock: no batch is mid-commit)."""
        async with self._runtime.lock:
            log.critical("%s: exiting to restart from the last checkpoint", message % args)
            logging.shutdown()
            os._exit(EXIT_INPUT_GAP)
