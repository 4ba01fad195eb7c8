"""``streamdp synth``: write synthetic events shaped like the seeds' data (JSON lines)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from streamdp.engine.periods import format_instant
from streamdp.errors import ConfigError
from streamdp.progress import ProgressLine
from streamdp.synth import SCENARIOS, example_spec, generate, release_instant


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        required=True,
        choices=SCENARIOS,
        help=(
            "which seed's data to imitate; each matches its spec in streamdp/examples "
            "(restaurant orders, hospital admissions, census persons, HIV admissions; "
            "hospital-patients: admissions of returning patients with a patient_id)"
        ),
    )
    parser.add_argument(
        "--periods", type=int, required=True, metavar="N", help="periods to generate"
    )
    parser.add_argument(
        "--rate", type=float, required=True, metavar="R", help="mean events per period"
    )
    parser.add_argument("--output", required=True, metavar="FILE", help="events, JSON lines")
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
    if args.periods < 1:
        raise ConfigError(f"--periods must be >= 1, got {args.periods}")
    if not math.isfinite(args.rate) or args.rate < 0:
        raise ConfigError(f"--rate must be a number >= 0, got {args.rate}")
    if not 0.0 <= args.bad_fraction <= 1.0:
        raise ConfigError(f"--bad-fraction must be between 0 and 1, got {args.bad_fraction}")
    good = bad = 0
    target = Path(args.output)
    if not target.parent.is_dir():
        raise ConfigError(
            f"--output {args.output!r}: directory {str(target.parent)!r} does not exist"
        )
    progress = ProgressLine("streamdp synth", args.periods, "periods", forced=args.progress)
    with target.open("w", encoding="utf-8") as out:
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
    sys.stderr.write(f"wrote {good} good and {bad} bad records to {args.output}\n")
    as_of = format_instant(release_instant(example_spec(args.scenario), args.periods))
    sys.stderr.write(f"every generated period is released by: replay ... --as-of {as_of}\n")
    return 0
