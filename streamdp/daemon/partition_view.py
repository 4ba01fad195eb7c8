"""One assigned input partition as the stall watchdog (:mod:`streamdp.daemon.watchdog`) sees
it: the client's view, the worker's durable position, the committed offsets by faust-streaming's
record and by the broker's answer; and the line the diagnostic dump shows of it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from faust.types import TP

from streamdp.daemon.stall_watch import FetchView


@dataclass(frozen=True)
class PartitionView:
    """One assigned input partition as the watchdog sees it."""

    topic: str
    partition: int
    view: FetchView | None  # what the client knows (None: no client now)
    processed: int  # the next offset whose effects are durable, as the worker saw it
    committed: int  # the consumer's committed offset, by faust-streaming's record
    waits_for_changelog: bool  # a table recovery waits for an unreachable changelog leader
    on_broker: int | None = None  # the committed offset the broker answered (None: no answer)
    diverged: bool = False  # the broker's committed offset was behind the record, last asked

    @property
    def resumes_from(self) -> int:
        """The committed offset a next owner would resume from: the broker's, if it answered."""
        return self.committed if self.on_broker is None else self.on_broker

    @property
    def done(self) -> int:
        return max(self.processed, self.committed)

    def summary(self, *, offsets: bool) -> str:
        """What the watchdog sees of this partition; its offsets, and whether records wait past
        the durable position or were fetched past it, only when ``offsets`` (input volume, only
        under ``--input-volume-metrics``: even "caught up" against "records past the durable
        position" tells a log reader whether input is waiting; audit of 2026-11-28)."""
        view = self.view
        leader = (
            ""
            if view is None
            else f"leader {view.leader} "
            f"({'connected' if view.leader_reachable else 'not connected'})"
        )
        waits = ", recovery waits for its changelog leader" if self.waits_for_changelog else ""
        if view is None:
            client = "no client view"
        elif offsets:
            client = f"end {view.end}, fetch position {view.fetched}, {leader}"
        else:
            known = "end unknown to the client" if view.end is None else "end known to the client"
            client = f"{known}, {leader}"
        if not offsets:
            behind = (
                ", the broker's committed offset behind faust-streaming's record"
                if self.diverged
                else ""
            )
            return f"{client}{waits}{behind}"
        broker = "" if self.on_broker is None else f" (on the broker {self.on_broker})"
        return f"processed to {self.processed}, committed {self.committed}{broker}, {client}{waits}"


def with_broker_commit(partition: PartitionView, offsets: dict[Any, int]) -> PartitionView:
    """``partition`` with the committed offset the broker answered, if it answered for it."""
    on_broker = offsets.get(TP(partition.topic, partition.partition))
    return partition if on_broker is None else replace(partition, on_broker=int(on_broker))


def with_end(partition: PartitionView, end: int | None) -> PartitionView:
    """``partition`` with the probed ``end`` where its client knew none."""
    view = partition.view
    if view is None or view.end is not None or end is None:
        return partition
    return replace(partition, view=replace(view, end=int(end)))
