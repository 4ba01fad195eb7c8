"""The stall watchdog as it reads a running worker (``streamdp.daemon.watchdog``), without a
broker: the client's view of each partition, the broker's end offsets and the worker's lock
and batch counter are stand-ins; the decisions are the real ``InputStallWatch``'s.

What these tests prove:
- a partition the consumer never fetched (its client knows no end) is still seen to have
  records: the check asks the broker for its end and exits 75 after the stall limit;
- a worker that keeps making batches durable is busy, not blocked: a partition it leaves behind
  all that time exits 75, even when every check falls inside one of its checkpoints;
- while one checkpoint stays under way from check to check (waiting for the broker), the clock
  does not run; a broker that cannot answer the end-offset question does not stop the checks;
- the commit check reads the broker's committed offsets: a partition whose commits the broker
  never took exits 75 even when faust-streaming's record says they were (and that divergence is
  logged once); a broker that does not answer is asked one question at a time and the check
  decides from the record meanwhile;
- the partition view the diagnostic dump prints says the same as what the check decides from;
- without ``--input-volume-metrics`` neither the dump nor an exit line shows an offset (offsets
  count a partition's records), only how they relate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from streamdp.daemon import watchdog as watchdog_module
from streamdp.daemon.observation import InputProgress
from streamdp.daemon.stall_watch import FetchView, InputStallWatch
from streamdp.daemon.watchdog import StallWatchdog
from streamdp.errors import EXIT_INPUT_GAP
from streamdp.metrics import StreamdpMetrics

STALL = 0.3  # seconds
FED = TP("admissions", 0)
STARVED = TP("orders", 1)
CHANGELOG = "app-state-changelog"


class ExitedError(Exception):
    """What the patched ``os._exit`` raises in place of ending the test process."""


class Consumer:
    """Faust's consumer as the watchdog reads it: assignment, committed offsets and the
    broker's end offsets (``highwaters``), which may fail."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.asked: list[tuple[TP, ...]] = []
        self.answers = True
        self._committed_offset: dict[TP, int] = {}
        # the broker's committed offsets where they differ from the record (a diverged commit)
        self.lost_commits: dict[TP, int] = {}
        self.commits_asked = 0
        self.commit_answer_delay = 0.0

    async def committed_on_broker(self, tps: list[TP]) -> dict[TP, int]:
        """What ``faust_internals.broker_committed_offsets`` answers."""
        self.commits_asked += 1
        await asyncio.sleep(self.commit_answer_delay)
        return {tp: self.lost_commits.get(tp, self._committed_offset.get(tp, 0)) for tp in tps}

    def assignment(self) -> set[TP]:
        return {FED, STARVED}

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        self.asked.append(tps)
        if not self.answers:
            raise ConnectionError("broker unreachable")
        return {tp: self.ends[tp] for tp in tps}


class World:
    """A worker, its client's views (``views``) and a watchdog reading them."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, views: dict[TP, FetchView], volume: bool = True
    ) -> None:
        self.views = views
        self.consumer = Consumer({FED: 1000, STARVED: 500})
        self.app = SimpleNamespace(
            should_stop=False, rebalancing=False, in_recovery=False, consumer=self.consumer
        )
        self.runtime = SimpleNamespace(
            lock=asyncio.Lock(),
            in_flight=None,
            batches=0,
            # --input-volume-metrics: log lines may show offsets (input volume)
            settings=SimpleNamespace(metrics_input_volume=volume),
        )
        self.progress = InputProgress(StreamdpMetrics(), InputStallWatch(STALL))
        self.watchdog = StallWatchdog(
            self.app, self.runtime, self.progress, {FED.topic, STARVED.topic}, CHANGELOG
        )  # type: ignore[arg-type]
        monkeypatch.setattr(watchdog_module, "fetch_view", lambda _c, tp: self.views.get(tp))
        monkeypatch.setattr(
            watchdog_module,
            "broker_committed_offsets",
            lambda consumer, tps: consumer.committed_on_broker(tps),
        )
        monkeypatch.setattr(watchdog_module, "PROBE_TIMEOUT_SECONDS", STALL / 10)

        def exit_(status: int) -> None:
            raise ExitedError(status)

        monkeypatch.setattr(watchdog_module.os, "_exit", exit_)
        monkeypatch.setattr(watchdog_module.logging, "shutdown", lambda: None)

    def feed(self, through: int) -> None:
        """A batch of the fed partition became durable (through offset ``through``) and its
        offsets were committed."""
        self.runtime.batches += 1
        self.progress.observe({(FED.topic, FED.partition): (through, 1)}, lambda _tp: 1000)
        self.consumer._committed_offset[FED] = through + 1


def reachable(end: int | None, fetched: int | None) -> FetchView:
    return FetchView(end=end, fetched=fetched, leader=0, leader_reachable=True)


def run_checks(world: World, seconds: float, worker: Any = None) -> int | None:
    """Check every STALL/6 s for ``seconds`` while ``worker()`` (a coroutine function: the
    worker's own work, holding its lock as it pleases) runs beside; the exit status if the
    watchdog exited."""

    async def go() -> int | None:
        beside = asyncio.ensure_future(worker()) if worker is not None else None
        await asyncio.sleep(0)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                await world.watchdog.check()
                await asyncio.sleep(STALL / 6)
        except ExitedError as exited:
            return int(exited.args[0])
        finally:
            if beside is not None:
                beside.cancel()
        return None

    return asyncio.run(go())


def test_a_partition_never_fetched_is_asked_of_the_broker_and_exits_75(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the client never fetched STARVED: no end known, position at the committed offset
    world = World(monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(None, 40)})
    world.feed(999)
    world.consumer._committed_offset[STARVED] = 40
    with caplog.at_level(logging.CRITICAL, logger="streamdp.daemon"):
        assert run_checks(world, 5 * STALL) == EXIT_INPUT_GAP
    assert world.consumer.asked
    assert all(asked == (STARVED,) for asked in world.consumer.asked)
    line = caplog.records[-1].getMessage()
    assert "orders[1] has records up to offset 499 but none from 40 arrived" in line, line
    assert "none fetched" in line


def test_without_the_brokers_answer_a_partition_never_fetched_does_not_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = World(monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(None, 40)})
    world.feed(999)
    world.consumer.answers = False
    assert run_checks(world, 4 * STALL) is None
    assert world.consumer.asked  # asked at every check, answered never


def test_a_busy_worker_that_leaves_a_partition_behind_exits_75(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # STARVED's records were fetched (position 300) and never delivered, while the worker
    # is never idle: every check falls inside one of its many short checkpoints
    world = World(monkeypatch, {FED: reachable(1000, 600), STARVED: reachable(500, 300)})
    world.consumer._committed_offset[STARVED] = 40

    async def busy() -> None:
        for through in range(100, 1_000_000):
            async with world.runtime.lock:  # one short checkpoint after another
                await asyncio.sleep(STALL / 50)
                world.feed(through)  # a batch of the other partition became durable

    with caplog.at_level(logging.CRITICAL, logger="streamdp.daemon"):
        assert run_checks(world, 6 * STALL, busy) == EXIT_INPUT_GAP
    line = caplog.records[-1].getMessage()
    assert "orders[1] has records up to offset 499 but none from 40 arrived" in line, line
    assert "fetched and never delivered" in line


def test_one_checkpoint_under_way_from_check_to_check_stops_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the same checkpoint waits for the broker through every check: not a stall
    world = World(monkeypatch, {FED: reachable(1000, 600), STARVED: reachable(500, 300)})
    world.consumer._committed_offset[STARVED] = 40

    async def waiting_for_the_broker() -> None:
        async with world.runtime.lock:
            await asyncio.sleep(3600)

    assert run_checks(world, 6 * STALL, waiting_for_the_broker) is None
    assert not world.consumer.asked  # no end-offset question while blocked


@pytest.mark.parametrize("volume", [True, False], ids=["offsets-opted-in", "public-logs"])
def test_a_commit_the_broker_never_took_exits_75_though_faust_records_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, volume: bool
) -> None:
    # every record of FED is durable and faust-streaming's record says all were committed;
    # the broker still has 400 (the divergence seen in CI): the next owner would resume there
    world = World(
        monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(500, 500)}, volume=volume
    )
    world.feed(999)
    world.consumer._committed_offset[STARVED] = 500
    world.consumer.lost_commits[FED] = 400
    with caplog.at_level(logging.WARNING, logger="streamdp.daemon"):
        assert run_checks(world, 5 * STALL) == EXIT_INPUT_GAP
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once, not at every check
    assert "admissions[0]: the broker's committed offset is behind" in warnings[0]
    line = caplog.records[-1].getMessage()
    assert "faust-streaming's record of its commits is further" in line, line
    dump = world.watchdog.describe()
    if volume:
        assert "(400 < 1000)" in warnings[0]
        assert "durable but the committed offset stayed at 400" in line, line
        assert any(
            d.startswith("admissions[0]: processed to 1000, committed 1000 (on the broker 400)")
            for d in dump
        ), dump
    else:
        assert any(
            d.startswith(
                "admissions[0]: end known to the client, leader 0 (connected), "
                "the broker's committed offset behind faust-streaming's record; commit clock "
            )
            for d in dump
        ), dump
        for number in ("400", "999", "1000"):
            assert number not in warnings[0], warnings
            assert number not in line, line


def test_a_broker_that_does_not_answer_is_asked_once_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # committed offsets are asked through the consumer's thread: a question that is never
    # answered is not asked again (no pile of questions), and the check goes on from the record
    world = World(monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(500, 500)})
    world.feed(999)
    world.consumer._committed_offset[STARVED] = 500
    world.consumer.commit_answer_delay = 3600
    assert run_checks(world, 4 * STALL) is None
    assert world.consumer.commits_asked == 1


def test_the_dump_shows_the_view_the_check_decides_from(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(monkeypatch, {FED: reachable(1000, 600), STARVED: reachable(None, 40)})
    world.feed(599)
    world.consumer._committed_offset[STARVED] = 40
    lines = world.watchdog.describe()
    assert (
        "admissions[0]: processed to 600, committed 600, end 1000, fetch position 600, "
        "leader 0 (connected)" in lines
    ), lines
    assert any(
        line.startswith("orders[1]: processed to 0, committed 40, end None") for line in lines
    )
    assert lines[-1] == "stall clocks run; no check yet"

    async def blocked() -> list[str]:
        await world.watchdog.check()  # no batch became durable after this check
        async with world.runtime.lock:
            return world.watchdog.describe()

    last = asyncio.run(blocked())[-1]
    assert last.startswith("stall clocks paused: a checkpoint under way; 1 checks, the last "), last
    assert last.endswith(" s ago (the broker answered)"), last


def test_the_dump_shows_which_stall_clocks_run_and_how_the_last_check_went(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a dump taken while a worker sits stuck says whether the checks run and whose clock is
    # counting towards the exit (what a stalled test's report needs)
    world = World(monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(500, 0)})
    world.feed(999)
    world.consumer._committed_offset[FED] = 400  # commits stopped at 400
    asyncio.run(world.watchdog.check())
    lines = world.watchdog.describe()
    fed = next(line for line in lines if line.startswith("admissions[0]:"))
    assert "; commit clock 0." in fed, fed
    starved = next(line for line in lines if line.startswith("orders[1]:"))
    assert "; input clock 0." in starved, starved
    assert lines[-1].startswith("stall clocks run; 1 checks, the last "), lines
    world.consumer.commit_answer_delay = 3600
    asyncio.run(world.watchdog.check())
    assert world.watchdog.describe()[-1].endswith("(no answer of the broker)")


def test_without_the_input_volume_opt_in_no_line_shows_an_offset(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the logs are a public surface by default: offsets count a partition's records
    world = World(
        monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(None, 40)}, volume=False
    )
    world.feed(999)
    world.consumer._committed_offset[STARVED] = 40
    lines = world.watchdog.describe()
    assert sorted(lines[:-1]) == [
        "admissions[0]: end known to the client, leader 0 (connected)",
        "orders[1]: end unknown to the client, leader 0 (connected)",
    ], lines
    with caplog.at_level(logging.CRITICAL, logger="streamdp.daemon"):
        assert run_checks(world, 5 * STALL) == EXIT_INPUT_GAP
    line = caplog.records[-1].getMessage()
    assert "orders[1] has records past the last durable one but none arrived" in line, line
    for number in ("499", "500", "40", "999", "1000"):
        assert number not in line.split("]", 1)[1].split(" for ")[0], line
    # nor whether records wait: a partition with records past the durable position, some
    # fetched, reads exactly like one caught up (audit of 2026-11-28: one bit of lag)
    behind = World(
        monkeypatch, {FED: reachable(1500, 1200), STARVED: reachable(None, 40)}, volume=False
    )
    behind.feed(999)
    behind.consumer._committed_offset[STARVED] = 40
    assert behind.watchdog.describe()[:-1] == lines[:-1]


def test_a_new_group_generation_restarts_the_commit_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # within one assignment a lower committed offset is the same stuck commit; a new
    # assignment (another generation) may legitimately start lower, so it starts afresh
    world = World(monkeypatch, {FED: reachable(1000, 1000), STARVED: reachable(500, 500)})
    world.feed(999)
    world.consumer._committed_offset[FED] = 400
    world.app.consumer_generation_id = 1
    assert run_checks(world, 0.8 * STALL) is None  # the clock ran 0.8 STALL

    async def new_generation() -> None:
        world.app.consumer_generation_id = 2
        world.consumer._committed_offset[FED] = 300
        await world.watchdog.check()

    asyncio.run(new_generation())
    fed = next(line for line in world.watchdog.describe() if line.startswith("admissions[0]:"))
    assert "; commit clock 0.0 s" in fed, fed  # restarted, not continued from 0.8 STALL
    assert run_checks(world, 2 * STALL) == EXIT_INPUT_GAP  # and it still exits when stuck
