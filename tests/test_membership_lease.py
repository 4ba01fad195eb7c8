"""The membership lease (``streamdp.daemon.membership_lease``): when a worker may still write.

The lease ends ``margin`` seconds before the earliest moment the group coordinator may have
expelled the worker: ``min(sent + rebalance_timeout, answered + session_timeout)``, with
``sent`` the send time of the last heartbeat or SyncGroup answered without error and
``answered`` that of the last one answered without error or with "rebalance in progress".
A step whose lease ran out waits up to a session timeout for a renewal in the same
generation, and raises ``MembershipLostError`` otherwise (or at once on a new generation).

Time is a fake monotonic clock the test moves; ``hold`` polls it between real zero-length
sleeps, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest
from aiokafka.protocol.group import HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest

from streamdp.daemon.membership_lease import MembershipLease, lease_margin
from streamdp.errors import MembershipLostError
from streamdp.faust_internals import NO_ERROR, REBALANCE_IN_PROGRESS, lease_renewals

SESSION = 10.0
REBALANCE = 20.0
MARGIN = 2.5
UNKNOWN_MEMBER_ID = 25  # Kafka's error codes
ILLEGAL_GENERATION = 22


class FakeClock:
    """Monotonic seconds that move only when told (or by ``tick`` per read, when set)."""

    def __init__(self, now: float = 100.0, tick: float = 0.0) -> None:
        self.now = now
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def make_lease(clock: FakeClock) -> MembershipLease:
    return MembershipLease(
        session_timeout=SESSION,
        rebalance_timeout=REBALANCE,
        margin=MARGIN,
        clock=clock,
        poll_seconds=0.0,
    )


def test_the_margin_is_a_quarter_of_the_session_timeout_and_at_least_half_a_second() -> None:
    assert lease_margin(10.0) == 2.5
    assert lease_margin(6.0) == 1.5
    assert lease_margin(1.0) == 0.5


@pytest.mark.parametrize("margin", [0.0, -1.0, SESSION, 15.0])
def test_a_margin_outside_the_timeouts_is_refused(margin: float) -> None:
    with pytest.raises(ValueError, match="lease margin"):
        MembershipLease(session_timeout=SESSION, rebalance_timeout=REBALANCE, margin=margin)


def test_no_lease_before_the_coordinator_first_answered() -> None:
    lease = make_lease(FakeClock())
    assert lease.valid_until() == -float("inf")
    assert lease.generation() is None


def test_an_answered_heartbeat_holds_the_lease_a_session_timeout_less_the_margin() -> None:
    lease = make_lease(FakeClock())
    lease.renew(3, sent=100.0)
    assert lease.valid_until() == 100.0 + SESSION - MARGIN
    lease.renew(3, sent=101.0)
    assert lease.valid_until() == 101.0 + SESSION - MARGIN
    # an answer to an earlier request arriving late does not move the lease back
    lease.renew(3, sent=100.5)
    assert lease.valid_until() == 101.0 + SESSION - MARGIN


def test_in_a_rebalance_the_lease_ends_a_rebalance_timeout_after_the_last_clean_answer() -> None:
    lease = make_lease(FakeClock())
    lease.renew(3, sent=100.0)
    # "rebalance in progress": still a member, for at most a rebalance timeout
    for sent in (101.0, 105.0, 110.0, 115.0):
        lease.renew(3, sent=sent, rebalancing=True)
        expected = min(100.0 + REBALANCE, sent + SESSION) - MARGIN
        assert lease.valid_until() == expected
    assert lease.valid_until() == 100.0 + REBALANCE - MARGIN


def test_rebalancing_answers_of_a_generation_not_yet_joined_renew_nothing() -> None:
    lease = make_lease(FakeClock())
    lease.renew(4, sent=100.0, rebalancing=True)
    assert lease.generation() is None
    lease.renew(3, sent=100.0)
    lease.renew(4, sent=105.0, rebalancing=True)
    assert lease.generation() == 3
    assert lease.valid_until() == 100.0 + SESSION - MARGIN


def test_a_new_generation_starts_its_own_lease() -> None:
    lease = make_lease(FakeClock())
    lease.renew(3, sent=100.0)
    lease.renew(3, sent=104.0, rebalancing=True)
    lease.renew(4, sent=106.0)  # SyncGroup of generation 4 answered
    assert lease.generation() == 4
    assert lease.valid_until() == 106.0 + SESSION - MARGIN


def test_hold_returns_at_once_while_the_lease_holds(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=100.0)
    clock.now = 100.0 + SESSION - MARGIN - 0.001
    caplog.set_level(logging.INFO, logger="streamdp")
    # at once: the coroutine finishes on its first step, without waiting or polling
    holding = lease.hold("a checkpoint")
    with pytest.raises(StopIteration) as finished:
        holding.send(None)
    assert finished.value.value == 3  # the generation whose lease holds
    assert clock.now == 100.0 + SESSION - MARGIN - 0.001
    assert not caplog.records  # and without the "not confirmed lately" warning


def test_hold_without_a_renewal_gives_up_after_a_session_timeout() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=100.0)
    clock.now = 100.0 + SESSION - MARGIN  # the lease just ran out
    clock.tick = 0.25
    started = clock.now
    with pytest.raises(MembershipLostError, match="a publication waited"):
        asyncio.run(lease.hold("a publication"))
    assert started + SESSION <= clock.now < started + SESSION + 1.0


async def _waiting_hold(lease: MembershipLease) -> asyncio.Task[int]:
    """A checkpoint's hold on ``lease``, started and seen still waiting (no answer yet)."""
    waiting = asyncio.create_task(lease.hold("a checkpoint"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    return waiting


def test_hold_goes_ahead_when_the_same_generation_is_renewed_meanwhile() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=90.0)

    async def scenario() -> None:
        waiting = await _waiting_hold(lease)
        clock.now = 101.0
        lease.renew(3, sent=100.5)  # a coordinator failover ended: the heartbeat answered
        await asyncio.wait_for(waiting, timeout=5)

    asyncio.run(scenario())


def test_hold_gives_up_at_once_when_the_generation_changed_meanwhile() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=90.0)

    async def scenario() -> None:
        waiting = await _waiting_hold(lease)
        lease.renew(4, sent=100.5)  # rejoined as a new member: the partitions may be others'
        with pytest.raises(MembershipLostError, match="new generation"):
            await asyncio.wait_for(waiting, timeout=5)

    asyncio.run(scenario())


def test_hold_before_any_answer_waits_and_gives_up() -> None:
    clock = FakeClock(now=100.0, tick=0.5)
    lease = make_lease(clock)
    with pytest.raises(MembershipLostError, match="expelled"):
        asyncio.run(lease.hold("a checkpoint"))


class FakeClient:
    """An aiokafka client whose coordinator answers with the error codes given in turn."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.sent: list[object] = []

    async def send(self, node_id: int, request: object, *, group: object = None) -> object:
        self.sent.append(request)
        return SimpleNamespace(error_code=self.codes.pop(0))


def test_the_coordinators_answers_renew_the_lease_through_the_wrapped_client() -> None:
    lease = MembershipLease(session_timeout=SESSION, rebalance_timeout=REBALANCE, margin=MARGIN)
    client = FakeClient([NO_ERROR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, NO_ERROR, NO_ERROR])
    consumer = SimpleNamespace(_client=client)
    lease_renewals(consumer, lease)

    async def exchange() -> None:
        send = consumer._client.send
        before = time.monotonic()
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)
        assert lease.generation() == 3
        first = lease.valid_until()
        assert before + SESSION - MARGIN <= first <= time.monotonic() + SESSION - MARGIN
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)  # rebalance in progress
        assert lease.valid_until() >= first  # answered later, same clean send time
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)  # unknown member: ended
        assert lease.generation() == 3
        assert lease.valid_until() == -float("inf")
        await send(1, SyncGroupRequest("g", 4, "m", None, []), group=None)
        assert lease.generation() == 4  # a SyncGroup answered: the new generation's lease
        # requests other than heartbeats and SyncGroup pass through and renew nothing
        await send(1, SimpleNamespace(API_KEY=1), group=None)
        assert lease.generation() == 4

    asyncio.run(exchange())
    assert len(client.sent) == 5
    assert not client.codes


def test_a_leave_group_ends_the_lease_before_it_is_sent() -> None:
    """aiokafka sends LeaveGroup by itself when the consumer was not polled for
    max.poll.interval (its heartbeat task) and at close; the coordinator drops the member on
    receipt and may give its partitions away at the next join, long before the session
    timeout the lease counts on. The lease ends before the request leaves the process."""
    lease = MembershipLease(session_timeout=SESSION, rebalance_timeout=REBALANCE, margin=MARGIN)
    ends_when_sent: list[float] = []

    class LeavingClient(FakeClient):
        async def send(self, node_id: int, request: object, *, group: object = None) -> object:
            if getattr(request, "API_KEY", None) == 13:
                ends_when_sent.append(lease.valid_until())
            return await super().send(node_id, request, group=group)

    client = LeavingClient([NO_ERROR, NO_ERROR, NO_ERROR])
    consumer = SimpleNamespace(_client=client)
    lease_renewals(consumer, lease)

    async def exchange() -> None:
        send = consumer._client.send
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)
        assert lease.valid_until() > time.monotonic()
        await send(1, LeaveGroupRequest("g", "m"), group=None)
        assert ends_when_sent == [-float("inf")]
        assert lease.valid_until() == -float("inf")
        with pytest.raises(MembershipLostError, match="left its consumer group"):
            await lease.hold("a publication")
        # a late answer of the generation it left renews nothing
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)
        assert lease.valid_until() == -float("inf")

    asyncio.run(exchange())


@pytest.mark.parametrize("code", [UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, 82])
def test_an_answer_that_the_member_is_out_ends_its_generations_lease(code: int) -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    client = FakeClient([NO_ERROR, code, code, NO_ERROR])
    consumer = SimpleNamespace(_client=client)
    lease_renewals(consumer, lease)

    async def exchange() -> None:
        send = consumer._client.send
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)
        assert lease.generation() == 3
        await send(1, HeartbeatRequest("g", 2, "m"), group=None)  # another generation's
        assert lease.valid_until() > -float("inf")
        await send(1, HeartbeatRequest("g", 3, "m"), group=None)
        assert lease.valid_until() == -float("inf")
        with pytest.raises(MembershipLostError, match="no longer a member of generation 3"):
            await asyncio.wait_for(lease.hold("a checkpoint"), timeout=5)
        await send(1, SyncGroupRequest("g", 4, "m2", None, []), group=None)
        assert lease.generation() == 4
        assert lease.valid_until() > -float("inf")  # rejoined: the new generation's lease

    asyncio.run(exchange())


def test_a_new_generation_renewed_while_hold_waits_never_passes_for_the_old_one() -> None:
    """The consumer's thread renews at any moment: here between hold's look at the lease's
    generation and its look at the lease's end (then through the clock, for a hold that
    reads both at once). The step must not go ahead on generation 4's lease."""
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=90.0)  # ran out at 97.5
    reads = 0
    looks = 0
    original_generation = lease.generation

    def generation_then_rejoined() -> int | None:
        nonlocal looks
        looks += 1
        seen = original_generation()
        if looks == 2:  # (the first look, before waiting, records the generation)
            lease.renew(4, sent=100.0)  # SyncGroup of generation 4 answered meanwhile
        return seen

    def clock_then_rejoined() -> float:
        nonlocal reads
        reads += 1
        if reads == 3:
            lease.renew(4, sent=100.0)
        return clock.now

    lease.generation = generation_then_rejoined  # type: ignore[method-assign]
    lease._clock = clock_then_rejoined

    with pytest.raises(MembershipLostError, match="new generation"):
        asyncio.run(asyncio.wait_for(lease.hold("a checkpoint"), timeout=5))


def test_a_later_step_holds_only_in_the_generation_the_first_step_held() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=100.0)
    assert asyncio.run(lease.hold("a checkpoint")) == 3
    assert asyncio.run(lease.hold("a publication", 3)) == 3
    lease.renew(4, sent=101.0)  # rejoined between the steps: a lease, but of generation 4
    with pytest.raises(MembershipLostError, match="new generation before a publication"):
        asyncio.run(asyncio.wait_for(lease.hold("a publication", 3), timeout=5))


def test_outlast_returns_the_acknowledgements_while_the_lease_holds() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=100.0)

    async def acknowledged() -> str:
        await asyncio.sleep(0)
        return "acknowledged"

    assert asyncio.run(lease.outlast(acknowledged(), "a checkpoint", 3)) == "acknowledged"


def test_outlast_gives_up_when_the_group_moves_on_before_the_acknowledgements() -> None:
    clock = FakeClock(now=100.0)
    lease = make_lease(clock)
    lease.renew(3, sent=100.0)

    async def scenario() -> None:
        never = asyncio.get_running_loop().create_future()
        waiting = asyncio.create_task(lease.outlast(never, "a checkpoint", 3))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        lease.renew(4, sent=101.0)  # rejoined: generation 3's writes are not covered by 4's lease
        with pytest.raises(MembershipLostError, match="new generation before a checkpoint"):
            await asyncio.wait_for(waiting, timeout=5)
        assert never.cancelled()

    asyncio.run(scenario())
