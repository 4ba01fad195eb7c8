"""The input-stall watchdog: exit (to restart from the last checkpoint) when an input partition
has records the consumer could fetch but none arrived for ``--stall-exit`` seconds, or its
committed offset stayed behind durable records that long (``CommitStallWatch``).

The decision per partition is :class:`~streamdp.daemon.batch_input.InputStallWatch`'s; this
module feeds it from the running worker: which partitions are assigned, how far each is done
(the larger of the next offset to process and the committed offset), what the client sees of
it (``faust_internals.fetch_view``), and whether the worker is blocked for a reason that is not
a stall (stopping, joining the group, a checkpoint under way).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from typing import Any

from faust.types import TP

from streamdp.daemon.batch_input import CommitStallWatch
from streamdp.daemon.fatal import worker_stopping
from streamdp.daemon.observation import InputProgress
from streamdp.daemon.runtime import WorkerRuntime
from streamdp.errors import EXIT_INPUT_GAP
from streamdp.faust_internals import committed_offset, fetch_view

log = logging.getLogger("streamdp.daemon")
__all__ = ["StallWatchdog", "watchdog_interval"]


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

    async def check(self) -> None:
        """Exit with ``EXIT_INPUT_GAP`` if a partition stalled; return otherwise."""
        # only a partition the consumer could fetch counts (streamdp.daemon.batch_input.
        # InputStallWatch): not while the worker joins the group, a checkpoint is being
        # written, or the partition's leader (in a table recovery: its changelog
        # partition's leader) is down or unknown. A recovery that stalls with its leaders
        # up still counts: a restart clears faust-streaming's stuck recoveries
        app = self._app
        runtime = self._runtime
        next_offset = self._progress.next_offset
        stall_watch = self._progress.stall_watch
        now = time.monotonic()
        consumer = app.consumer
        in_flight = runtime.in_flight
        recovering = bool(getattr(app, "in_recovery", False))
        blocked = (
            worker_stopping(app)
            or (bool(getattr(app, "rebalancing", False)) and not recovering)
            or runtime.lock.locked()
            or (in_flight is not None and not in_flight.done())
        )
        for tp in list(consumer.assignment()):
            if tp.topic not in self._input_names:
                continue
            key = (tp.topic, tp.partition)
            view = fetch_view(consumer, tp)
            processed = next_offset.get(key, 0)
            committed = committed_offset(consumer, tp)
            done = max(processed, committed)
            restoring_from = (
                fetch_view(consumer, TP(self._changelog_topic, tp.partition))
                if recovering
                else None
            )
            waits_for_changelog = restoring_from is not None and not restoring_from.leader_reachable
            waited = stall_watch.check(
                key, view, done, blocked=blocked or waits_for_changelog, now=now
            )
            if waited is not None and view is not None and view.end is not None:
                fetched = view.fetched is not None and view.fetched > done
                await self._exit_to_restart(
                    "input %s[%d] has records up to offset %d but none from %d arrived "
                    "for %.0f s while they could be fetched (%s)",
                    tp.topic, tp.partition, view.end - 1, done, waited,
                    "fetched and never delivered: faust-streaming dropped a fetch"
                    if fetched else f"leader node {view.leader} reachable, none fetched",
                )  # fmt: skip
            stuck = self._commit_watch.check(key, processed, committed, blocked=blocked, now=now)
            if stuck is not None:
                await self._exit_to_restart(
                    "input %s[%d]: records up to offset %d are durable but the consumer's "
                    "committed offset stayed at %d for %.0f s (faust-streaming never "
                    "acknowledged a record after it)",
                    tp.topic, tp.partition, processed - 1, committed, stuck,
                )  # fmt: skip

    async def _exit_to_restart(self, message: str, *args: object) -> None:
        """Log ``message`` at CRITICAL and exit 75 (under the lock: no batch is mid-commit)."""
        async with self._runtime.lock:
            log.critical("%s: exiting to restart from the last checkpoint", message % args)
            logging.shutdown()
            os._exit(EXIT_INPUT_GAP)
