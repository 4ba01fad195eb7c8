"""The worker's aiokafka consumer long-polls for ``--fetch-wait`` seconds, not Faust's 1.5 s
(streamdp.faust_internals explains the stalls the long poll causes; the daemon benchmark
measures them); and the stall watchdog's decision (``InputStallWatch``): exit on records the
consumer could fetch and never delivered, never while the partition's leader is down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamdp.broker import KafkaBroker
from streamdp.daemon.app import create_app
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.stall_watch import CommitStallWatch, FetchView, InputStallWatch
from streamdp.faust_internals import fetch_view


@pytest.mark.parametrize("input_path", ["batch", "stream"])
@pytest.mark.parametrize(("fetch_wait", "expected_ms"), [(0.1, 100), (0.25, 250), (2.0, 2000)])
def test_the_worker_consumer_long_polls_for_the_configured_time(
    tmp_path: Path, input_path: str, fetch_wait: float, expected_ms: int
) -> None:
    spec = Path(str(resources.files("streamdp").joinpath("examples", "restaurant.toml")))
    settings = DaemonSettings(
        config=spec, data_dir=tmp_path, fetch_wait_seconds=fetch_wait, input_path=input_path
    )

    async def go() -> tuple[int, int]:
        app, _ = create_app(settings)
        thread = app.consumer._new_consumer_thread()  # type: ignore[attr-defined]
        consumer = thread._create_worker_consumer(app.transport)
        try:
            # the value AIOKafkaConsumer.start() hands to its Fetcher; and Faust's own
            # configuration beside it is left as it was (1 MB per partition)
            return consumer._fetch_max_wait_ms, consumer._max_partition_fetch_bytes
        finally:
            await consumer.stop()

    assert asyncio.run(go()) == (expected_ms, 1024**2)


# ---------------------------------------------------------------- the input stall watchdog
KEY = ("orders", 0)
STALL = 5.0


def view(
    *, end: int | None = 10, fetched: int | None = 4, leader: int | None = 1, reachable: bool = True
) -> FetchView:
    return FetchView(end=end, fetched=fetched, leader=leader, leader_reachable=reachable)


def first_exit(watch: InputStallWatch, views: list[FetchView], done: int = 4) -> float | None:
    """The first check time (one check a second) at which the watch says: exit."""
    for second, seen in enumerate(views):
        if watch.check(KEY, seen, done, blocked=False, now=float(second)) is not None:
            return float(second)
    return None


def test_records_the_leader_could_serve_but_never_arrive_are_a_stall() -> None:
    watch = InputStallWatch(STALL)
    assert first_exit(watch, [view()] * 20) == STALL


def test_records_fetched_and_never_delivered_are_a_stall_whatever_the_leader() -> None:
    # faust-streaming's dropped fetch: the client's position is past the durable offset
    watch = InputStallWatch(STALL)
    assert first_exit(watch, [view(fetched=10, reachable=False)] * 20) == STALL


@pytest.mark.parametrize(
    "down",
    [view(reachable=False), view(leader=None, reachable=False), view(leader=-1, reachable=False)],
    ids=["leader-unreachable", "leader-unknown", "no-leader"],
)
def test_a_partition_without_a_reachable_leader_never_stalls(down: FetchView) -> None:
    watch = InputStallWatch(STALL)
    assert first_exit(watch, [down] * 600) is None


def test_the_clock_restarts_when_a_failover_ends() -> None:
    # reachable for 4 s, the leader dies for 30 s, a new leader is reachable: a full period again
    views = [view()] * 4 + [view(reachable=False)] * 30 + [view(leader=2)] * 20
    watch = InputStallWatch(STALL)
    assert first_exit(watch, views) == 34 + STALL


def test_a_leader_change_alone_restarts_the_clock() -> None:
    views = [view(leader=1)] * 4 + [view(leader=2)] * 20
    assert first_exit(InputStallWatch(STALL), views) == 4 + STALL


def test_a_rebalance_restoring_or_a_checkpoint_write_stops_the_clock() -> None:
    watch = InputStallWatch(STALL)
    for second in range(4):
        assert watch.check(KEY, view(), 4, blocked=False, now=float(second)) is None
    assert watch.check(KEY, view(), 4, blocked=True, now=4.0) is None
    for second in range(5, 5 + int(STALL)):
        assert watch.check(KEY, view(), 4, blocked=False, now=float(second)) is None
    assert watch.check(KEY, view(), 4, blocked=False, now=5 + STALL) == STALL


def test_progress_or_nothing_to_read_stops_the_clock() -> None:
    watch = InputStallWatch(STALL)
    for second in range(4):
        watch.check(KEY, view(), 4, blocked=False, now=float(second))
    watch.progressed(KEY)
    assert watch.check(KEY, view(), 4, blocked=False, now=4.0) is None
    assert watch.check(KEY, view(), 4, blocked=False, now=4 + STALL - 0.5) is None
    assert watch.check(KEY, view(), 4, blocked=False, now=4 + STALL) == STALL
    caught_up = InputStallWatch(STALL)
    assert first_exit(caught_up, [view(end=4)] * 20) is None
    assert first_exit(caught_up, [view(end=None)] * 20) is None
    assert first_exit(InputStallWatch(STALL), [None] * 20) is None  # type: ignore[list-item]


def test_a_partition_assigned_again_starts_its_clock_from_zero() -> None:
    # its clock ran here before it was revoked; assigned again long after, a stale start
    # would end the worker at the first check
    watch = InputStallWatch(STALL)
    for second in range(3):
        assert watch.check(KEY, view(), 4, blocked=False, now=float(second)) is None
    watch.keep_only({("orders", 1)})  # KEY revoked
    assert watch.check(KEY, view(), 4, blocked=False, now=100.0) is None
    assert watch.check(KEY, view(), 4, blocked=False, now=100 + STALL - 0.5) is None
    assert watch.check(KEY, view(), 4, blocked=False, now=100 + STALL) == STALL
    commits = CommitStallWatch(STALL)
    for second in range(3):
        assert commits.check(KEY, 900, 100, blocked=False, now=float(second)) is None
    commits.keep_only(set())
    assert commits.check(KEY, 900, 100, blocked=False, now=100.0) is None
    assert commits.check(KEY, 900, 100, blocked=False, now=100 + STALL) == STALL


@pytest.mark.broker
def test_fetch_view_reads_a_real_consumers_position_end_and_leader(
    kafka_broker: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    """``fetch_view`` reads aiokafka's own state (position, high watermark, leader and its
    connection), so the watchdog sees what the client sees; None for a partition it does not
    hold (a revoked one)."""
    topic = unique_name("view")
    kafka_broker.create_topics({topic: 1})

    async def go() -> tuple[FetchView | None, FetchView | None]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        try:
            for number in range(3):
                await producer.send_and_wait(topic, b"%d" % number, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = await consumer.getmany(tp, timeout_ms=10_000, max_records=1)
            assert [r.offset for r in got[tp]] == [0]
            faust_consumer = SimpleNamespace(
                _thread=SimpleNamespace(_ensure_consumer=lambda: consumer)
            )
            held = fetch_view(faust_consumer, tp)
            not_held = fetch_view(faust_consumer, TopicPartition(topic + "-other", 0))
            return held, not_held
        finally:
            await consumer.stop()

    held, not_held = asyncio.run(go())
    assert held == FetchView(end=3, fetched=1, leader=0, leader_reachable=True)
    assert not_held is None


def first_commit_exit(watch: CommitStallWatch, states: list[tuple[int, int, bool]]) -> float | None:
    """The first check time (one a second) at which the commit watch says: exit; ``states``
    are (processed, committed, blocked) per second."""
    for second, (processed, committed, blocked) in enumerate(states):
        if watch.check(KEY, processed, committed, blocked=blocked, now=float(second)) is not None:
            return float(second)
    return None


def test_a_committed_offset_that_stays_behind_durable_records_is_a_stuck_commit() -> None:
    # faust-streaming never acknowledged a record after the committed offset (a record dropped
    # below the worker's applied offsets): the work goes on, the commit never moves
    watch = CommitStallWatch(STALL)
    assert first_commit_exit(watch, [(60_000, 589, False)] * 20) == STALL


def test_a_commit_that_follows_the_work_or_a_blocked_worker_is_never_a_stuck_commit() -> None:
    watch = CommitStallWatch(STALL)
    # committing behind the work by a second, every second, for a long backlog
    assert (
        first_commit_exit(watch, [(1000 * (s + 2), 1000 * (s + 1), False) for s in range(40)])
        is None
    )
    # caught up: nothing past the committed offset
    assert first_commit_exit(CommitStallWatch(STALL), [(500, 500, False)] * 40) is None
    # blocked (a checkpoint, a rebalance) restarts the clock
    blocked_every_fourth = [(900, 100, s % 4 == 3) for s in range(40)]
    assert first_commit_exit(CommitStallWatch(STALL), blocked_every_fourth) is None
    # a commit that catches up with the work, then stops: exits a full period after the
    # catch-up
    moving_then_stuck = [(900 + 100 * s, 900 + 100 * (s - 1), False) for s in range(5)] + [
        (1400, 1200, False)
    ] * 30
    assert first_commit_exit(CommitStallWatch(STALL), moving_then_stuck) == 4 + STALL


def test_a_commit_that_crawls_far_behind_the_work_is_a_stuck_commit() -> None:
    # faust-streaming counting delivered offsets twice after a seek (faust_internals): each
    # commit advances one offset while the work is 60,000 records ahead
    crawling = [(60_265, 340 + s, False) for s in range(40)]
    assert first_commit_exit(CommitStallWatch(STALL), crawling) == STALL
    # the same work committed a second late but in full each time: never stuck
    following = [(1000 * (s + 2), 1000 * (s + 1), False) for s in range(40)]
    assert first_commit_exit(CommitStallWatch(STALL), following) is None


def test_a_stuck_commit_read_in_turn_from_the_broker_and_from_the_record_still_exits() -> None:
    # the broker's answer (950) below faust-streaming's record (953), read in turn when the
    # broker answers only every other check: the same stuck commit, not a moving one
    alternating = [(60_265, 953 if s % 2 else 950, False) for s in range(40)]
    assert first_commit_exit(CommitStallWatch(STALL), alternating) == STALL
    # a commit that follows the work, seen lower now and then, restarts the clock each time it
    # reaches the offset that was durable when its clock started
    following = [
        (1000 * (s + 2), 1000 * (s + 1) - (5 if s % 3 == 0 else 0), False) for s in range(40)
    ]
    assert first_commit_exit(CommitStallWatch(STALL), following) is None
