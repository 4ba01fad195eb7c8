"""The stall watchdog's clocks (:mod:`streamdp.daemon.watchdog`): what the consumer knows of an
input partition (:class:`FetchView`), and the two clocks that tell a stalled input partition
(:class:`InputStallWatch`) or a stuck commit (:class:`CommitStallWatch`) from a broker or a
consumer that is only slow. Pure bookkeeping over the readings they are given: no clock, no
client, no I/O."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class FetchView:
    """What the worker's Kafka consumer knows of one input partition (for the stall watchdog)."""

    #: the high watermark of the last fetch response: records exist below it (None: no answer)
    end: int | None
    #: the consumer's fetch position: the next offset it asks the leader for (None: unknown)
    fetched: int | None
    #: the partition leader's node id in the consumer's metadata (None or -1: no leader known)
    leader: int | None
    #: whether the consumer holds an open connection to that leader
    leader_reachable: bool


class InputStallWatch:
    """Tells a stalled input partition (exit and restart from the checkpoint) from a broker that
    cannot serve it yet (wait: the client retries on its own).

    A partition is *stalled* when, for ``stall_seconds`` without a break, it had records past the
    worker's position (``end > done``), none of them became durable, and the consumer could
    have fetched them: either it had already fetched past ``done`` (records fetched and never
    delivered: faust-streaming's dropped fetch) or the partition's leader was known and
    connected. While the partition has no leader or its leader is unreachable (a node down, an
    election under way), or the caller says the worker is ``blocked`` (joining the group,
    writing a checkpoint), the clock does not run; it restarts from zero when the leader
    changes (a failover just ended) and whenever records become durable (:meth:`progressed`).
    """

    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self._since: dict[tuple[str, int], float] = {}
        self._leader: dict[tuple[str, int], int | None] = {}

    def progressed(self, key: tuple[str, int]) -> None:
        """Records of partition ``key`` became durable: its clock stops."""
        self._since.pop(key, None)

    def keep_only(self, keys: Collection[tuple[str, int]]) -> None:
        """Stop the clocks of partitions not in ``keys`` (no longer assigned): one assigned
        again later starts from zero, not from when it last ran here."""
        for key in [k for k in self._since if k not in keys]:
            del self._since[key]

    def running_for(self, key: tuple[str, int], now: float) -> float | None:
        """Seconds the clock of partition ``key`` has run, or None when it does not run."""
        since = self._since.get(key)
        return None if since is None else now - since

    def check(
        self, key: tuple[str, int], view: FetchView | None, done: int, *, blocked: bool, now: float
    ) -> float | None:
        """Seconds partition ``key`` has been stalled once that reaches ``stall_seconds``, else
        None. ``done``: the next offset whose effects are durable; ``blocked``: the worker
        cannot take records now for a reason that is not a stall (joining the group, a
        checkpoint waiting for its changelog leader, stopping)."""
        if view is None or blocked:
            self._since.pop(key, None)
            return None
        if self._leader.get(key, view.leader) != view.leader:
            self._since.pop(key, None)  # a failover just ended: the new leader gets a full period
        self._leader[key] = view.leader
        if view.end is None or view.end <= done:
            self._since.pop(key, None)  # nothing to read past the position
            return None
        fetched_past = view.fetched is not None and view.fetched > done
        if not fetched_past and not view.leader_reachable:
            self._since.pop(key, None)  # no leader to fetch from: the broker's business
            return None
        first = self._since.setdefault(key, now)
        waited = now - first
        return waited if waited >= self.stall_seconds else None


class CommitStallWatch:
    """Tells a consumer whose commits stopped or crawl (exit and restart from the checkpoint)
    from one that commits behind its work, as it always does by up to a commit interval.

    A partition's commit is *stuck* when, for ``stall_seconds`` without a break, the committed
    offset did not reach the offset the worker had made durable when that time began. A
    healthy consumer commits what is durable within a commit interval, so its clock keeps
    restarting; one whose committed offset does not move, or moves a few offsets at a time
    while the work runs far ahead (as faust-streaming's own commit step did on the stream path,
    ``streamdp.faust_internals``, "Acknowledged commits"), is stuck. Within one assignment a
    committed offset only moves forward, and a lower value read meanwhile (the broker's answer
    below faust-streaming's record, the two read in turn when the broker does not always answer)
    changes nothing; the watchdog forgets every clock when the group's generation changes. A
    restart re-reads from the committed offset, which the checkpoint's applied offsets make
    exact. The clock does not run while the worker is ``blocked``.
    """

    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        # per partition: when the clock started, and the durable offset the commit must reach
        self._since: dict[tuple[str, int], tuple[float, int]] = {}

    def keep_only(self, keys: Collection[tuple[str, int]]) -> None:
        """Stop the clocks of partitions not in ``keys`` (no longer assigned)."""
        for key in [k for k in self._since if k not in keys]:
            del self._since[key]

    def running_for(self, key: tuple[str, int], now: float) -> float | None:
        """Seconds the clock of partition ``key`` has run, or None when it does not run."""
        since = self._since.get(key)
        return None if since is None else now - since[0]

    def check(
        self, key: tuple[str, int], processed: int, committed: int, *, blocked: bool, now: float
    ) -> float | None:
        """Seconds the commit of partition ``key`` has been stuck once that reaches
        ``stall_seconds``, else None. ``processed``: the next offset whose effects are durable;
        ``committed``: the consumer's committed offset."""
        since = self._since.get(key)
        if blocked or processed <= committed or (since is not None and committed >= since[1]):
            self._since.pop(key, None)  # caught up with the work as it stood: a fresh period
            return None
        if since is None:
            self._since[key] = (now, processed)
            return None
        waited = now - since[0]
        return waited if waited >= self.stall_seconds else None
