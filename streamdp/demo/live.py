"""The demo's live part, on one event loop: paced producers, the output consumer, polling the
worker's ``/status`` and ``/metrics``, and drawing the board (a terminal board on a tty, plain
log lines otherwise) until the session is stopped.

The scenario the producers play (sources, event rates, the share of bad records) and the pace of
the worker's simulated clock are defined here; :mod:`streamdp.demo.session` starts the broker
and the worker around it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

SCENARIOS = (
    # (scenario, source, good events per simulated day)
    ("restaurant", "restaurant-orders", 200.0),
    ("hospital", "hospital-admissions", 150.0),
)
BAD_FRACTION = 0.01
DAY_SECONDS = 86400.0
#: The worker's simulated clock runs this many wall seconds behind the feeds, so records reach
#: the worker before their day closes even at a fast --pace (it adds to the allowed lateness).
WORKER_CLOCK_LAG = 1.0


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - loopback http
            body: bytes = response.read()
    except (OSError, ValueError):
        return None
    return body.decode("utf-8", errors="replace")


@dataclass
class Live:
    """The asynchronous part: producers, the output consumer, polling and drawing."""

    args: argparse.Namespace
    spec: Any
    bootstrap: str
    port: int
    # the wall instant (Unix seconds) the feeds start at; the worker's clock starts
    # WORKER_CLOCK_LAG seconds later, at ``origin`` (the streams' start)
    anchor: float = field(default_factory=time.time)
    origin: float = 0.0
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    started: float = field(default_factory=time.monotonic)
    stats: dict[str, Any] = field(default_factory=dict)
    board: Any = None
    #: serve the public feed page (streamdp.feed) on this loopback port, if set
    feed_port: int | None = None
    #: the terminal board (a rich Live display) while one is drawn
    live: Any = None

    def summary(self) -> str:
        """One line: events sent, releases and revisions read, dead letters."""
        from streamdp.demo.board import DEAD_LETTER_NOTE

        sent = sum(s.sent for s in self.stats.values())
        bad = sum(s.bad for s in self.stats.values())
        releases = sum(v.releases for v in self.board.streams.values()) if self.board else 0
        letters = sum(self.board.dead_letters.values()) if self.board else 0
        return (
            f"{sent:,} events sent ({bad} bad), {releases:,} releases read, {letters} dead letters "
            f"({DEAD_LETTER_NOTE})"
        )

    async def main(self, worker_exit: Callable[[], int | None]) -> str | None:
        """Run until stopped; returns None after a clean stop, or what went wrong."""
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        from streamdp.demo.board import Board
        from streamdp.demo.feed import FeedStats, Record, paced_records, run_feed

        self.board = board = Board(self.spec)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        consumer = AIOKafkaConsumer(
            "streamdp.releases",
            "streamdp.consistent",
            "streamdp.dead-letter",
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await producer.start()
        await consumer.start()

        async def send(record: Record) -> Any:
            return await producer.send(record.topic, record.value, key=record.key)

        tasks: list[asyncio.Task[Any]] = []
        failure: str | None = None
        try:
            for i, (scenario, source, rate) in enumerate(SCENARIOS):
                self.stats[source] = FeedStats()
                # synthetic input (not noise): reproducible with --insecure-seed, else new every run
                base = (
                    self.args.insecure_seed
                    if self.args.insecure_seed is not None
                    else time.time_ns() % 2**31
                )
                records = paced_records(
                    scenario,
                    self.spec,
                    source,
                    rate=rate,
                    pace=self.args.pace,
                    seed=base * len(SCENARIOS) + i,
                    bad_fraction=BAD_FRACTION,
                )
                tasks.append(
                    asyncio.create_task(
                        run_feed(
                            records,
                            send,
                            self.stats[source],
                            pace=self.args.pace,
                            stop=stop,
                            start=time.monotonic() + (self.anchor - time.time()),
                        )
                    )
                )
            tasks.append(asyncio.create_task(self._consume(consumer, board, stop)))
            tasks.append(asyncio.create_task(self._poll(board, stop)))
            if self.feed_port is not None:
                from streamdp.feed.server import serve_live

                feed = serve_live(self.bootstrap, "streamdp", self.feed_port, stop)
                tasks.append(asyncio.create_task(feed))
            self.started = time.monotonic()
            deadline = None if self.args.duration is None else self.started + self.args.duration
            tty = self.stream.isatty()
            if tty:
                from rich.console import Console
                from rich.live import Live as LiveDisplay

                console = Console(file=self.stream)
                self.live = LiveDisplay(
                    console=console, auto_refresh=False, vertical_overflow="crop"
                )
                self.live.start()
            last_status = 0.0
            while not stop.is_set():
                code = worker_exit()
                if code is not None:
                    failure = f"the worker exited unexpectedly with code {code}"
                    break
                for task in tasks:
                    if task.done() and task.exception() is not None:
                        failure = f"a demo task failed: {task.exception()!r}"
                if failure:
                    break
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if tty:
                    self._redraw()
                else:
                    self._log_lines(now, force_status=now - last_status >= 5.0)
                    if now - last_status >= 5.0:
                        last_status = now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.5 if tty else 1.0)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in (producer, consumer):
                # a client whose broker connection broke may fail or be cancelled while stopping
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(client.stop(), timeout=10.0)
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if failure is None:
            if self.live is not None:
                self._redraw()
            else:
                self._log_lines(time.monotonic(), force_status=True)
        if self.live is not None:
            self.live.stop()
            self.live = None
        return failure

    async def _consume(self, consumer: Any, board: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for messages in batches.values():
                for message in messages:
                    try:
                        record = json.loads(message.value)
                    except (ValueError, TypeError):
                        continue
                    if isinstance(record, dict):
                        board.add(record)

    async def _poll(self, board: Any, stop: asyncio.Event) -> None:
        base = f"http://127.0.0.1:{self.port}"
        while not stop.is_set():
            status = await asyncio.to_thread(_fetch, base + "/status")
            if status is not None:
                with contextlib.suppress(ValueError):
                    board.set_status(json.loads(status))
            metrics = await asyncio.to_thread(_fetch, base + "/metrics")
            if metrics is not None:
                with contextlib.suppress(ValueError):
                    board.set_budget(metrics)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)

    def _progress(self, now: float) -> str:
        day = max((s.simulated_day for s in self.stats.values()), default=0)
        sent = sum(s.sent for s in self.stats.values())
        bad = sum(s.bad for s in self.stats.values())
        board = self.board
        ready = "ready" if board.ready else "starting"
        return (
            f"[{now - self.started:6.1f}s] simulated day {day + 1}; sent {sent:,} events "
            f"({bad} bad); worker {ready}, public clock {self.clock_text()}"
        )

    def clock_text(self) -> str:
        """The worker's simulated clock now (what decides which periods are released)."""
        if self.args.pace <= 0:
            return "-"
        simulated = self.origin + (time.time() - self.anchor - WORKER_CLOCK_LAG) * (
            DAY_SECONDS / self.args.pace
        )
        if simulated < self.origin:
            return f"starts in {self.anchor + WORKER_CLOCK_LAG - time.time():.0f} s"
        return time.strftime("%Y-%m-%d %H:%M", time.gmtime(simulated))

    def _redraw(self) -> None:
        """Draw the board in the terminal, sized to it (the full header was printed once above;
        the board keeps a three-line summary of it)."""
        if self.live is None:
            return
        from streamdp.demo.board_view import render_board

        height = self.live.console.size.height
        self.live.update(render_board(self.board, self.compact_header(), height), refresh=True)

    def compact_header(self) -> list[str]:
        """The board's header lines (:func:`streamdp.demo.board_view.board_header`)."""
        from streamdp.demo.board_view import board_header

        board = self.board
        return board_header(
            insecure=self.args.insecure_seed is not None or board.noise_secure is False,
            ready=board.ready,
            elapsed=time.monotonic() - self.started,
            day=max((s.simulated_day for s in self.stats.values()), default=0) + 1,
            clock=self.clock_text(),
            port=self.port,
            feed_port=self.feed_port,
        )

    def _log_lines(self, now: float, *, force_status: bool) -> None:
        lines = self.board.updates()
        if force_status:
            lines += [
                self._progress(now),
                "  " + self.board.budget_line(),
                "  " + self.board.dead_letter_line(),
            ]
        if lines:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
