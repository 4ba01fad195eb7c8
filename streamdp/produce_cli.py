"""``streamdp produce``: synthetic events sent live to a source's topic, stamped with the
moment they are sent, at a steady pace (a worker on the wall clock counts them as they come).

``--write-spec FILE`` writes instead the scenario's example spec with short fixed periods
starting now (:func:`streamdp.synth.live.live_spec_text`), so that such a worker releases
every minute (by default) rather than first releasing every day since the example's start.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from streamdp.bootstrap_address import check_bootstrap
from streamdp.engine import load_spec
from streamdp.errors import BrokerError, ConfigError
from streamdp.synth import SCENARIOS
from streamdp.synth.generators import EXAMPLE_FILES
from streamdp.synth.live import LiveEvent, live_events, live_spec_text, stamped

#: Seconds between progress lines.
REPORT_SECONDS = 5.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        required=True,
        choices=SCENARIOS,
        help="which made-up data to send (the scenarios of `streamdp synth`)",
    )
    parser.add_argument(
        "--write-spec",
        metavar="FILE",
        help="write the scenario's example spec with fixed periods of --period-seconds "
        "starting now, then exit without sending (for a worker on the wall clock; not with "
        "--bootstrap or --config)",
    )
    parser.add_argument(
        "--period-seconds",
        type=int,
        default=60,
        metavar="S",
        help="with --write-spec: the length of every stream's periods (default 60)",
    )
    parser.add_argument(
        "--config", metavar="SPEC", help="the spec the worker runs (names the source's topic)"
    )
    parser.add_argument("--bootstrap", metavar="HOST:PORT", help="the broker to send to")
    parser.add_argument(
        "--per-second",
        type=float,
        default=5.0,
        metavar="R",
        help="events sent per second, evenly spaced (default 5)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long (default: until Ctrl-C)",
    )
    parser.add_argument(
        "--bad-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="probability of a bad record after each good event (default 0)",
    )
    parser.add_argument(
        "--data-seed", type=int, default=0, metavar="S", help="seed of the synthetic data"
    )


def run(args: argparse.Namespace) -> int:
    if args.write_spec is not None:
        return _write_spec(args)
    if args.config is None or args.bootstrap is None:
        raise ConfigError(
            "--config and --bootstrap are required to send events (or --write-spec FILE to "
            "write a spec for a worker on the wall clock)"
        )
    check_bootstrap(args.bootstrap)
    if not (math.isfinite(args.per_second) and args.per_second > 0):
        raise ConfigError(f"--per-second must be a number > 0, got {args.per_second}")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise ConfigError(f"--duration must be a number of seconds > 0, got {args.duration}")
    if not 0.0 <= args.bad_fraction <= 1.0:
        raise ConfigError(f"--bad-fraction must be between 0 and 1, got {args.bad_fraction}")
    spec = load_spec(args.config)
    try:
        events = live_events(
            args.scenario, spec, seed=args.data_seed, bad_fraction=args.bad_fraction
        )
        first = next(events)
    except ConfigError as error:  # the spec does not fit the scenario (a bug stays a bug)
        raise ConfigError(f"--config {args.config}: {error}") from error
    try:
        return asyncio.run(_send(args, first, events))
    except KeyboardInterrupt:
        return 0


def _write_spec(args: argparse.Namespace) -> int:
    sending = [
        flag
        for flag, value in (("--bootstrap", args.bootstrap), ("--config", args.config))
        if value is not None
    ]
    if sending:
        raise ConfigError(
            f"--write-spec writes a spec and exits without sending anything: drop "
            f"{' and '.join(sending)} (then send with `streamdp produce --config FILE "
            "--bootstrap HOST:PORT`)"
        )
    if args.period_seconds < 1:
        raise ConfigError(f"--period-seconds must be >= 1, got {args.period_seconds}")
    target = Path(args.write_spec)
    if not target.parent.is_dir():
        raise ConfigError(
            f"--write-spec {args.write_spec!r}: directory {str(target.parent)!r} does not exist"
        )
    example = resources.files("streamdp").joinpath("examples", EXAMPLE_FILES[args.scenario])
    text = live_spec_text(
        example.read_text("utf-8"),
        args.period_seconds,
        time.time(),
        examples_dir=Path(str(example)).parent,
    )
    target.write_text(text, encoding="utf-8")
    load_spec(str(target))  # it loads: the worker will accept it
    sys.stderr.write(
        f"wrote {target}: the {args.scenario} example with periods of "
        f"{args.period_seconds} s starting now\n"
    )
    return 0


async def _send(args: argparse.Namespace, first: LiveEvent, events: Iterator[LiveEvent]) -> int:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=5)
    try:
        await producer.start()
    except KafkaError as error:
        await producer.stop()
        raise BrokerError(f"cannot reach the broker at {args.bootstrap}: {error}") from error
    interval = 1.0 / args.per_second
    started = time.monotonic()
    report = started + REPORT_SECONDS
    sent = bad = 0
    pending: list[Any] = []
    topic = first.topic
    try:
        for event in itertools.chain([first], events):
            due = started + sent * interval
            now = time.monotonic()
            if args.duration is not None and due - started >= args.duration:
                break
            if due > now:
                if pending:
                    await asyncio.gather(*pending)
                    pending = []
                await asyncio.sleep(due - now)
            pending.append(
                await producer.send(event.topic, stamped(event, time.time()), key=event.key)
            )
            sent += 1
            bad += event.bad
            if time.monotonic() >= report:
                report += REPORT_SECONDS
                _report(sent, bad, topic)
        if pending:
            await asyncio.gather(*pending)
    except KafkaError as error:
        raise BrokerError(f"sending to {args.bootstrap} failed: {error}") from error
    finally:
        await producer.stop()
    _report(sent, bad, topic)
    return 0


def _report(sent: int, bad: int, topic: str) -> None:
    sys.stderr.write(f"streamdp produce: sent {sent:,} records ({bad:,} bad) to {topic}\n")
    sys.stderr.flush()
