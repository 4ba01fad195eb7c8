"""The demo session: broker, worker, producers and the live board, in one process.

``streamdp demo`` runs this module as a child process in its own session (see
:mod:`streamdp.demo_cli`), so a Ctrl-C in the terminal reaches only the demo's front process,
which then asks this one to stop with SIGTERM; this process stops producers, the worker
(SIGTERM, then wait) and the broker in that order. Run alone (``python -m
streamdp.demo.session ARGS``) it takes the same arguments as ``streamdp demo``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from streamdp.errors import StreamdpError

SCENARIOS = (
    # (scenario, source, good events per simulated day)
    ("restaurant", "restaurant-orders", 200.0),
    ("hospital", "hospital-admissions", 150.0),
)
BAD_FRACTION = 0.01
DAY_SECONDS = 86400.0
#: Seconds from starting the worker to the instant the feeds and the simulated clock start (the
#: worker is ready by then on a loaded 2-core machine).
DEMO_START_DELAY = 15.0
#: The worker's simulated clock runs this many wall seconds behind the feeds, so records reach
#: the worker before their day closes even at a fast --pace (it adds to the allowed lateness).
WORKER_CLOCK_LAG = 1.0
DEFAULT_WEB_PORT = 6066


def session(args: argparse.Namespace) -> int:
    """Run the demo in this process; returns 0 after a clean stop (SIGINT, SIGTERM or
    ``args.duration``), 1 if the worker or a demo task failed."""
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        with tempfile.TemporaryDirectory(prefix="streamdp-demo-") as tmp:
            return _run(args, Path(tmp))
    except KeyboardInterrupt:
        return 0
    except StreamdpError as error:  # e.g. the broker cannot start: say why, no traceback
        print(f"streamdp demo: error: {error}", file=sys.stderr)  # noqa: T201
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m streamdp.demo.session`` (same arguments as ``streamdp demo``)."""
    from streamdp.demo_cli import check_args, register

    parser = argparse.ArgumentParser(prog="streamdp demo")
    register(parser)
    args = parser.parse_args(argv)
    check_args(args)
    return session(args)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
    raise KeyboardInterrupt


def _web_port(requested: int | None) -> int:
    from streamdp.broker import free_loopback_port

    if requested is not None:
        return requested
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", DEFAULT_WEB_PORT))
        except OSError:
            return free_loopback_port()
    return DEFAULT_WEB_PORT


def _run(args: argparse.Namespace, tmp: Path) -> int:
    from streamdp.broker import EmbeddedBroker, free_loopback_port
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.daemon.topology import required_topics
    from streamdp.demo.worker import WorkerProcess, worker_command
    from streamdp.engine import load_spec
    from streamdp.engine.periods import PeriodClock, format_instant

    out = sys.stdout
    resource = resources.files("streamdp").joinpath("examples", "demo.toml")
    with (
        resources.as_file(resource) as config,
        EmbeddedBroker(log_path=tmp / "tansu.log") as broker,
    ):
        spec = load_spec(config)
        settings = DaemonSettings(
            config=config, bootstrap=broker.bootstrap, partitions=args.partitions
        )
        broker.create_topics(required_topics(spec, settings))
        port = _web_port(args.web_port)
        feed_port = free_loopback_port()  # the public feed page (streamdp feed), in-process
        # the worker's public clock: simulated days at the producers' pace, from the spec's
        # start at a wall instant a few seconds ahead (the worker is ready by then); the
        # producers start sending at that same instant
        anchor = time.time() + DEMO_START_DELAY
        origin = min(PeriodClock(s.period).bounds(0)[0] for s in spec.streams.values())
        worker_anchor = anchor + WORKER_CLOCK_LAG
        clock = f"simulated:{format_instant(origin)}@{worker_anchor!r}x{DAY_SECONDS / args.pace!r}"
        argv = worker_command(
            config=config,
            bootstrap=broker.bootstrap,
            partitions=args.partitions,
            web_port=port,
            data_dir=tmp / "worker-data",
            insecure_seed=args.insecure_seed,
            clock=clock,
        )
        worker = WorkerProcess(argv, tmp / "worker.log")
        try:
            header = _header(args, spec, broker.bootstrap, broker.pid, worker.pid, port)
            header.append(f"public feed page (release topics only): http://127.0.0.1:{feed_port}/")
            out.write("\n".join(header) + "\n\n")
            out.flush()
            live = Live(
                args=args,
                spec=spec,
                bootstrap=broker.bootstrap,
                port=port,
                anchor=anchor,
                origin=origin,
                feed_port=feed_port,
            )
            failure = asyncio.run(live.main(worker.exit_code))
        finally:
            # shutting down: a second Ctrl-C or SIGTERM must not cut the worker's shutdown short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            code = worker.stop()
        if failure:
            out.write(f"\nstreamdp demo: {failure}\nworker log:\n{worker.log_tail()}\n")
            return 1
    out.write(f"\nstopped: worker exited with code {code}, broker stopped; {live.summary()}\n")
    out.flush()
    return 0


def _header(  # noqa: PLR0917 - one line each
    args: argparse.Namespace,
    spec: Any,
    bootstrap: str,
    broker_pid: int,
    worker_pid: int,
    port: int,
) -> list[str]:
    from streamdp.demo.board import half_width95
    from streamdp.planner.accuracy import plan

    if args.insecure_seed is None:
        noise = "noise: OpenDP exact discrete Laplace (secure sampler)"
    else:
        noise = (
            f"noise: INSECURE seeded sampler (--insecure-seed {args.insecure_seed}), demo noise "
            "only: these releases are NOT private"
        )
    plans = []
    for name, stream in spec.streams.items():
        p = plan(
            stream.mechanism,
            stream.objective,
            stream.horizon,
            float(stream.epsilon),
            float(stream.sensitivity),
        )
        plans.append(f"{name} ±{half_width95(p.mean_variance**0.5):,.0f}")
    rates = ", ".join(f"{source} ~{rate:g}/day" for _, source, rate in SCENARIOS)
    where = f"embedded Kafka broker (Tansu) at {bootstrap} (broker pid {broker_pid})"
    pace = f"{BAD_FRACTION:.0%} bad records; one simulated day every {args.pace:g} s"
    return [
        f"streamdp demo: {where}, one worker (worker pid {worker_pid}), spec demo.toml",
        noise,
        f"worker metrics: http://127.0.0.1:{port}/metrics   status: http://127.0.0.1:{port}/status",
        f"input: {rates}, {pace}; Ctrl-C stops",
        (
            "periods close on the worker's public clock (simulated at the same pace, 12 "
            "simulated hours after a day ends), never on event times"
        ),
        "planner, typical 95% error of a running total (2.12 sd + 1, mean sd over the horizon): "
        + ", ".join(plans),
    ]


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
    records_read: int = 0
    #: serve the public feed page (streamdp.feed) on this loopback port, if set
    feed_port: int | None = None
    #: the terminal board (a rich Live display) while one is drawn
    live: Any = None

    def summary(self) -> str:
        """One line: events sent, releases and revisions read, dead letters."""
        sent = sum(s.sent for s in self.stats.values())
        bad = sum(s.bad for s in self.stats.values())
        releases = sum(v.releases for v in self.board.streams.values()) if self.board else 0
        letters = sum(self.board.dead_letters.values()) if self.board else 0
        return (
            f"{sent:,} events sent ({bad} bad), {releases:,} releases read, {letters} dead letters"
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
                        self.records_read += 1

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
        the board keeps a two-line summary of it)."""
        if self.live is None:
            return
        height = self.live.console.size.height
        self.live.update(self.board.renderable(self.compact_header(), height), refresh=True)

    def compact_header(self) -> list[str]:
        """The board's two header lines: noise, progress and the worker's clock; addresses."""
        board = self.board
        insecure = self.args.insecure_seed is not None or board.noise_secure is False
        noise = "INSECURE seeded noise, NOT private" if insecure else "secure noise (OpenDP)"
        day = max((s.simulated_day for s in self.stats.values()), default=0)
        elapsed = time.monotonic() - self.started
        ready = "ready" if board.ready else "starting"
        feed = f"feed http://127.0.0.1:{self.feed_port}/ · " if self.feed_port else ""
        progress = f"{elapsed:.0f}s, day {day + 1} · worker {ready} · clock {self.clock_text()}"
        return [
            f"streamdp demo · {noise} · {progress}",
            f"{feed}metrics http://127.0.0.1:{self.port}/metrics · Ctrl-C stops",
        ]

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


if __name__ == "__main__":
    sys.exit(main())
