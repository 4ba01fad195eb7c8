"""``streamdp synth``: write made-up test events (restaurant orders, hospital admissions, census
records; never real data) as JSON lines, one scenario per example spec."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import IO

from streamdp.engine.periods import LATEST_INSTANT, format_instant
from streamdp.errors import ConfigError
from streamdp.progress import ProgressLine
from streamdp.synth import SCENARIOS, example_spec, generate
from streamdp.synth.generators import (
    full_release_instant,
    generated_end,
    periods_within_horizons,
)

#: The largest --rate: a period's events are drawn in memory at once (10 million take about
#: 80 MB), so a larger rate is refused rather than failing in numpy.
MAX_RATE = 10_000_000
#: The most periods: beyond, even one-second periods would have to be checked one by one.
MAX_PERIODS = 100_000_000


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        required=True,
        choices=SCENARIOS,
        help=(
            "which made-up data to write; each matches its spec in streamdp/examples "
            "(restaurant orders, hospital admissions, census persons, HIV admissions; "
            "hospital-patients: admissions of returning patients with a patient_id)"
        ),
    )
    parser.add_argument(
        "--periods", type=int, required=True, metavar="N", help="periods to generate"
    )
    parser.add_argument(
        "--rate",
        type=float,
        required=True,
        metavar="R",
        help=f"mean events per period (at most {MAX_RATE:,})",
    )
    parser.add_argument(
        "--output", required=True, metavar="FILE", help="events, JSON lines (- for stdout)"
    )
    parser.add_argument(
        "--data-seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the synthetic data (not of any noise: synth draws no noise; default 0)",
    )
    parser.add_argument(
        "--bad-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="probability of a bad record after each good event, cycling through every "
        "rejection kind (default 0)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="report progress on stderr even when it is not a terminal (on a terminal: always)",
    )


def run(args: argparse.Namespace) -> int:
    check_args(args)
    if args.output == "-":
        try:
            good, bad = _write(args, sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped early (`| head`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    else:
        target = Path(args.output)
        try:
            out = target.open("w", encoding="utf-8")
        except OSError as error:
            raise ConfigError(
                f"--output {args.output!r} cannot be written: {error.strerror}"
            ) from None
        try:
            with out:
                good, bad = _write(args, out)
        except BaseException:
            target.unlink(missing_ok=True)  # no partial or empty file is left behind
            raise
    where = "stdout" if args.output == "-" else args.output
    sys.stderr.write(f"wrote {good} good and {bad} bad records to {where}\n")
    as_of = format_instant(full_release_instant(example_spec(args.scenario), args.periods))
    sys.stderr.write(f"every generated period is released by: replay ... --as-of {as_of}\n")
    return 0


def _check_periods(scenario: str, periods: int) -> None:
    """Refuse periods past the engine's calendar (their events would all fall in its last
    instant) or past a stopping stream's horizon (every event there would be refused)."""
    spec = example_spec(scenario)
    if periods > MAX_PERIODS or generated_end(spec, periods) > LATEST_INSTANT:
        raise ConfigError(
            f"--periods {periods} runs past {format_instant(LATEST_INSTANT)}, the last instant "
            "streamdp takes an event at; generate fewer periods"
        )
    within = periods_within_horizons(spec, periods)
    if within < periods:
        stopping = [n for n, s in spec.streams.items() if s.on_epoch_end == "stop"]
        raise ConfigError(
            f"--periods {periods} runs past the horizon of stream {stopping[0]!r}, which stops "
            f"there (on_epoch_end = 'stop') and refuses later events; give at most {within}"
        )


def check_args(args: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` for the first argument out of range, before any file is
    opened (a refused command leaves no output file)."""
    if args.periods < 1:
        raise ConfigError(f"--periods must be >= 1, got {args.periods}")
    if not math.isfinite(args.rate) or not 0 <= args.rate <= MAX_RATE:
        raise ConfigError(
            f"--rate must be a number of events per period from 0 to {MAX_RATE:,}, got "
            f"{args.rate:g}; for more events, generate more periods"
        )
    if args.data_seed < 0:
        raise ConfigError(f"--data-seed must be an integer >= 0, got {args.data_seed}")
    _check_periods(args.scenario, args.periods)
    if not 0.0 <= args.bad_fraction <= 1.0:
        raise ConfigError(f"--bad-fraction must be between 0 and 1, got {args.bad_fraction}")
    if args.output == "-":
        return
    target = Path(args.output)
    if target.is_dir():
        raise ConfigError(
            f"--output {args.output!r} is a directory; give a file name (e.g. "
            f"{str(target / 'events.jsonl')!r}), or - for stdout"
        )
    if not target.parent.is_dir():
        raise ConfigError(
            f"--output {args.output!r}: directory {str(target.parent)!r} does not exist"
        )


def _write(args: argparse.Namespace, out: IO[str]) -> tuple[int, int]:
    """Write the generated lines to ``out``; the numbers of good and bad records."""
    good = bad = 0
    progress = ProgressLine("streamdp synth", args.periods, "periods", forced=args.progress)
    for line in generate(
        args.scenario,
        args.periods,
        args.rate,
        seed=args.data_seed,
        bad_fraction=args.bad_fraction,
    ):
        out.write(line.text + "\n")
        if line.expect is None:
            good += 1
        else:
            bad += 1
        if (good + bad) % 1024 == 0:
            progress.update(line.period, f"{good + bad:,} records")
    progress.finish(args.periods, f"{good + bad:,} records")
    return good, bad
