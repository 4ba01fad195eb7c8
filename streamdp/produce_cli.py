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
from streamdp.synth.live import (
    LiveEvent,
    check_scenario_fits,
    live_events,
    live_spec_text,
    stamped,
)

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
        metavar="F",
        help="probability of a bad record after each good event (default 0)",
    )
    parser.add_argument(
        "--data-seed", type=int, metavar="S", help="seed of the synthetic data (default 0)"
    )


#: The flags that shape what is sent, and their defaults (None: until Ctrl-C).
_SENDING_DEFAULTS = {
    "per_second": 5.0,
    "duration": None,
    "bad_fraction": 0.0,
    "data_seed": 0,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    if args.write_spec is not None:
        return _write_spec(args)
    if args.config is None or args.bootstrap is None:
        raise ConfigError(
            "--config and --bootstrap are required to send events (or --write-spec FILE to "
            "write a spec for a worker on the wall clock)"
        )
    if args.period_seconds is not None:
        raise ConfigError(
            "--period-seconds shapes the spec --write-spec writes; a sending produce follows "
            "the periods of --config: drop it"
        )
    for name, default in _SENDING_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.data_seed < 0:
        raise ConfigError(f"--data-seed must be an integer >= 0, got {args.data_seed}")
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
        check_scenario_fits(args.scenario, spec)
    except ConfigError as error:  # the spec does not fit the scenario (a bug stays a bug)
        raise ConfigError(f"--config {args.config}: {error}") from error
    try:
        return asyncio.run(_send(args, first, events))
    except KeyboardInterrupt:
        return 0


def _write_spec(args: argparse.Namespace) -> int:
    sending = [
        flag
        for flag, value in (
            ("--bootstrap", args.bootstrap),
            ("--config", args.config),
            *((_flag(name), getattr(args, name)) for name in _SENDING_DEFAULTS),
        )
        if value is not None
    ]
    if sending:
        raise ConfigError(
            f"--write-spec writes a spec and exits without sending anything: drop "
            f"{' and '.join(sending)} (then send with `streamdp produce --config FILE "
            "--bootstrap HOST:PORT`)"
        )
    period_seconds = 60 if args.period_seconds is None else args.period_seconds
    if period_seconds < 1:
        raise ConfigError(f"--period-seconds must be >= 1, got {period_seconds}")
    target = Path(args.write_spec)
    if not args.write_spec or target.is_dir():
        what = "is a directory" if args.write_spec else "is empty"
        raise ConfigError(f"--write-spec {args.write_spec!r} {what}; give a file name")
    if not target.parent.is_dir():
        raise ConfigError(
            f"--write-spec {args.write_spec!r}: directory {str(target.parent)!r} does not exist"
        )
    example = resources.files("streamdp").joinpath("examples", EXAMPLE_FILES[args.scenario])
    text = live_spec_text(
        example.read_text("utf-8"),
        period_seconds,
        time.time(),
        examples_dir=Path(str(example)).parent,
    )
    # written beside the target and renamed once it loads: a spec the worker would refuse
    # never stands under the name asked for
    draft = target.with_name(f".{target.name}.draft")
    try:
        draft.write_text(text, encoding="utf-8")
        try:
            load_spec(str(draft))
        except ConfigError as error:
            said = str(error).replace(str(draft), str(target))
            raise ConfigError(
                f"--write-spec: nothing written, the spec would be refused: {said}"
            ) from None
        draft.replace(target)
    except OSError as error:
        raise ConfigError(f"--write-spec {args.write_spec!r}: {error.strerror}") from None
    finally:
        draft.unlink(missing_ok=True)
    sys.stderr.write(
        f"wrote {target}: the {args.scenario} example with periods of "
        f"{period_seconds} s starting now\n"
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
