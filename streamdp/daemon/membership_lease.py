"""The worker's lease on its group membership: writes and publications only while the group
coordinator cannot yet have given this worker's partitions to another.

A worker expelled from the consumer group without knowing it (the whole process paused past
the session timeout, or cut off from the group coordinator while it still reaches the
partition leaders) would otherwise go on closing periods of sources whose next owner closes
them too, each with its own draw: two noisy values of one release, averaging away noise. Kafka
only fences that with transactions (docs/architecture.md, "Exactly-once: outbox vs
transactions"); the lease is the worker's own bound on when the coordinator may have expelled
it.

The coordinator (classic group protocol) removes a member no earlier than

- a session timeout after it *received* the member's last heartbeat it answered, and
- a rebalance timeout after a rebalance began, which is after it received the member's last
  heartbeat it answered without error.

A request is received after it is sent, so with ``sent`` the send time of the last heartbeat
(or SyncGroup, which starts a generation) answered without error and ``answered`` that of the
last one answered without error or with "rebalance in progress" (the member is still in the
group, which is waiting for it to rejoin), the worker is a member at least until::

    min(sent + rebalance_timeout, answered + session_timeout)

The lease ends ``margin`` seconds before that, time left for the writes it allows to reach
the broker. Every step of the checkpoint protocol first :meth:`MembershipLease.hold`\\ s the
lease (:mod:`streamdp.daemon.commit`): a step whose lease ran out waits up to a session
timeout for a renewal in the same generation (a slow coordinator, a coordinator failover), and
raises :class:`MembershipLostError` (exit 75: restart) when none comes or the generation
changed. Heartbeats run in the consumer's own thread (faust-streaming's consumer thread), so
a busy event loop does not starve them; :func:`streamdp.faust_internals.lease_renewals`
feeds the answers in.

Holding the lease when a step starts is not enough for the checkpoint's writes: they are
queued at once and reach the broker as fast as it takes them, which for a wide stream's node
parts (hundreds of MB) is many seconds, so a worker cut off from the coordinator (or in a
rebalance it cannot rejoin while its checkpoint travels) would go on writing past its
expulsion. :meth:`MembershipLease.outlast` waits for their acknowledgements only while the
lease holds; when it ends first the caller ends the process at once, and the writes still
queued in it die with it (:mod:`streamdp.daemon.commit`).

The lease also :meth:`~MembershipLease.end`\\ s at once, whatever time is left, when the worker
sends a LeaveGroup (aiokafka leaves by itself when its consumer was not polled for
``max.poll.interval``, and at close: the coordinator drops the member as soon as it receives
the request and may hand its partitions over within the next join) and when the coordinator
answers a heartbeat or SyncGroup of the lease's generation with "unknown member", "illegal
generation" or "fenced instance": the member is no longer in that generation. A late answer
of that generation renews nothing more.

What it does not cover: a pause of more than ``margin`` seconds between the check and the
broker's receipt of what it allowed (docs/architecture.md, "The checkpoint protocol", ownership).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from streamdp.errors import MembershipLostError

log = logging.getLogger("streamdp.daemon")
__all__ = ["MembershipLease", "lease_margin"]
T = TypeVar("T")


def lease_margin(session_timeout: float) -> float:
    """Seconds the lease ends before the earliest moment of expulsion: a quarter of the
    session timeout, at least 0.5 s (2.5 s with the default 10 s session timeout)."""
    return max(0.5, session_timeout / 4)


def _abandon(waiting: asyncio.Future[T]) -> None:
    """Cancel ``waiting`` and take its outcome when it comes (a gather cancelled ends with an
    exception that would otherwise be logged as never retrieved)."""
    waiting.cancel()
    waiting.add_done_callback(lambda done: done.cancelled() or done.exception())


@dataclass(frozen=True)
class _Renewal:
    """The coordinator's latest answers: when the requests were sent (monotonic seconds)."""

    generation: int
    #: the last heartbeat or SyncGroup answered without error
    sent: float
    #: the last one answered without error or with "rebalance in progress"
    answered: float
    #: the worker left the group or the coordinator said it is out of this generation
    ended: bool = False


class MembershipLease:
    """The lease (see the module docstring). ``renew`` is called from the consumer's thread,
    ``valid_until`` and ``hold`` from the event loop; ``clock`` is monotonic seconds."""

    def __init__(
        self,
        *,
        session_timeout: float,
        rebalance_timeout: float,
        margin: float,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = 0.05,
    ) -> None:
        if not 0 < margin < min(session_timeout, rebalance_timeout):
            raise ValueError(
                f"the lease margin ({margin} s) must be positive and below the session "
                f"({session_timeout} s) and rebalance ({rebalance_timeout} s) timeouts"
            )
        self.session_timeout = session_timeout
        self.rebalance_timeout = rebalance_timeout
        self.margin = margin
        self._clock = clock
        self._poll = poll_seconds
        self._lock = threading.Lock()
        self._renewal: _Renewal | None = None

    def renew(self, generation: int, sent: float, *, rebalancing: bool = False) -> None:
        """The coordinator answered a request of ``generation`` sent at ``sent`` without error
        (``rebalancing``: with "rebalance in progress")."""
        with self._lock:
            last = self._renewal
            if last is not None and last.generation == generation and last.ended:
                return  # a late answer: the membership of this generation is over
            if last is None or last.generation != generation:
                if rebalancing:
                    return  # not a member of this generation yet
                self._renewal = _Renewal(generation, sent, sent)
            elif rebalancing:
                self._renewal = _Renewal(generation, last.sent, max(last.answered, sent))
            else:
                self._renewal = _Renewal(generation, max(last.sent, sent), max(last.answered, sent))

    def end(self, generation: int | None = None) -> None:
        """The membership of ``generation`` (None: the lease's current one) is over: the
        worker sent a LeaveGroup, or the coordinator answered that it is no longer a member of
        that generation. The lease ends now; only a new generation's renewal starts another."""
        with self._lock:
            last = self._renewal
            if last is None or (generation is not None and last.generation != generation):
                return
            self._renewal = _Renewal(last.generation, last.sent, last.answered, ended=True)

    def _current(self) -> _Renewal | None:
        with self._lock:
            return self._renewal

    def valid_until(self) -> float:
        """The monotonic instant the lease ends (-inf before the first renewal)."""
        return self._until(self._current())

    def _until(self, renewal: _Renewal | None) -> float:
        if renewal is None or renewal.ended:
            return -float("inf")
        return (
            min(
                renewal.sent + self.rebalance_timeout,
                renewal.answered + self.session_timeout,
            )
            - self.margin
        )

    def generation(self) -> int | None:
        """The generation of the latest renewal (None before the first)."""
        renewal = self._current()
        return None if renewal is None else renewal.generation

    async def hold(self, step: str, generation: int | None = None) -> int:
        """Return the generation whose lease holds now; when it has run out, wait up to a
        session timeout for a renewal in the same generation. ``generation``: the one an
        earlier step of the same commit held (a lease of another generation holds nothing for
        this step). Raises :class:`MembershipLostError` when no renewal comes, the generation
        is or becomes another or the lease was ended (``step`` names what was about to
        happen). Each look at the lease reads one renewal: a new generation's renewal arriving
        from the consumer's thread meanwhile never passes for the old one's."""
        now = self._clock()
        renewal = self._current()
        self._check(renewal, step, generation)
        if renewal is not None and now < self._until(renewal):
            return renewal.generation
        waited_for = None if renewal is None else renewal.generation
        log.warning(
            "the group coordinator has not confirmed this worker's membership lately: %s "
            "waits for it (up to %.0f s)",
            step,
            self.session_timeout,
        )
        deadline = now + self.session_timeout
        while True:
            await asyncio.sleep(self._poll)
            now = self._clock()
            renewal = self._current()
            self._check(renewal, step, waited_for, waiting=True)
            if renewal is not None and now < self._until(renewal):
                log.info("the group coordinator answered: %s goes ahead", step)
                return renewal.generation
            if now >= deadline:
                raise MembershipLostError(
                    f"no answer from the group coordinator for a session timeout while "
                    f"{step} waited: this worker may have been expelled from the group (its "
                    "partitions given to another), so it wrote nothing more"
                )

    async def outlast(self, pending: Awaitable[T], step: str, generation: int | None) -> T:
        """``pending``'s result (the broker's acknowledgements of the writes ``step`` sent),
        awaited only while the lease of ``generation`` holds (renewals meanwhile extend it).
        Raises :class:`MembershipLostError` when the lease ends, or turns out to be another
        generation's, before ``pending`` completes: the writes not yet acknowledged may reach
        the broker after the coordinator may have expelled the worker, so the caller must not
        let them (it ends the process, and what is still queued in it with it)."""
        waiting = asyncio.ensure_future(pending)
        while True:
            await asyncio.wait({waiting}, timeout=self._poll)
            if waiting.done():
                return waiting.result()
            now = self._clock()
            renewal = self._current()
            try:
                self._check(renewal, step, generation)
            except MembershipLostError:
                _abandon(waiting)
                raise
            if renewal is None or now >= self._until(renewal):
                _abandon(waiting)
                raise MembershipLostError(
                    f"the membership lease ran out while the broker had not acknowledged every "
                    f"write of {step}: the group coordinator may expel this worker before the "
                    "rest reaches the broker, so it ends now and the writes still queued in it "
                    "with it"
                )

    @staticmethod
    def _check(
        renewal: _Renewal | None, step: str, generation: int | None, *, waiting: bool = False
    ) -> None:
        """Raise unless ``renewal`` may hold for ``step`` of ``generation`` (None: any when
        not ``waiting``)."""
        if renewal is not None and renewal.ended:
            raise MembershipLostError(
                f"this worker left its consumer group, or the group coordinator answered that it "
                f"is no longer a member of generation {renewal.generation}, before {step}: its "
                "partitions may be another's, so it wrote nothing more"
            )
        current = None if renewal is None else renewal.generation
        if (waiting or generation is not None) and current != generation:
            raise MembershipLostError(
                f"the consumer group moved to a new generation before {step} (the commit "
                f"began in generation {generation}, the lease is now of {current}): this "
                "worker may no longer own the partitions it was about to write for, so it "
                "wrote nothing more"
            )
