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
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

from streamdp.demo.live import BAD_FRACTION, DAY_SECONDS, SCENARIOS, WORKER_CLOCK_LAG, Live
from streamdp.errors import StreamdpError

#: Seconds from starting the worker to the instant the feeds and the simulated clock start (the
#: worker is ready by then on a loaded 2-core machine).
DEMO_START_DELAY = 15.0
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
    from streamdp.error_band import half_width95
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
        _schedule_line(spec, args.pace),
        "planner, typical 95% error of a running total (2.12 sd + 1, mean sd over the horizon): "
        + ", ".join(plans),
    ]


def _schedule_line(spec: Any, pace: float) -> str:
    """When the demo's periods are released: the worker's clock passes a period's end plus its
    allowed lateness (simulated time), then the worker waits its delivery allowance (wall
    seconds, which the simulated clock turns into days)."""
    from streamdp.daemon.settings import DEFAULT_DELIVERY_ALLOWANCE

    hours = max(s.allowed_lateness_seconds for s in spec.streams.values()) / 3600
    days = DEFAULT_DELIVERY_ALLOWANCE / pace if pace > 0 else 0.0
    return (
        f"periods close on the worker's public clock (simulated at the same pace), never on "
        f"event times: a period is released {hours:g} simulated hours after it ends plus the "
        f"worker's {DEFAULT_DELIVERY_ALLOWANCE:g} s delivery allowance ({days:.1f} simulated "
        f"days at this pace)"
    )


if __name__ == "__main__":
    sys.exit(main())
