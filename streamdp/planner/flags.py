"""The flags of ``streamdp plan`` (:mod:`streamdp.planner.cli` runs them)."""

from __future__ import annotations

import argparse

from streamdp.continual.kary_config import KARY_OBJECTIVES
from streamdp.continual.strategy import ALL_MECHANISMS
from streamdp.continual.variance import NOISES
from streamdp.planner.zcdp import ZCDP_MECHANISMS

#: Flags that describe one configuration; --config takes all of them from the spec instead.
CONFIGURATION_FLAGS = (
    "mechanism", "objective", "branching", "horizon", "epsilon", "sensitivity", "rho", "delta",
    "l2_sensitivity", "buffers", "max_events_per_period", "max_periods_per_epoch",
)  # fmt: skip


def register(parser: argparse.ArgumentParser) -> None:
    """Add the planner's arguments."""
    parser.add_argument(
        "--config",
        metavar="SPEC.toml",
        default=None,
        help=(
            "plan every stream of this stream specification with its own mechanism, objective, "
            "horizon, epsilon and sensitivity (instead of the flags describing one stream)"
        ),
    )
    parser.add_argument(
        "--mechanism",
        choices=tuple(dict.fromkeys((*ALL_MECHANISMS, *ZCDP_MECHANISMS))),
        default=None,
        help=(
            "how the noisy partial sums are laid out and weighted (default fda; under --rho "
            "default blt, and one of " + ", ".join(ZCDP_MECHANISMS) + ")"
        ),
    )
    parser.add_argument(
        "--objective",
        choices=KARY_OBJECTIVES,
        default=None,
        help=(
            "total (default): lowest average error of running totals; minimax: lowest "
            "worst-case error (fda, kary_*); count: lowest period-count error (kary_* only); "
            "binary and naive have fixed weights and take total only"
        ),
    )
    parser.add_argument(
        "--branching",
        type=int,
        default=None,
        help="k of the k-ary mechanisms (default: chosen for the objective and horizon)",
    )
    parser.add_argument("--horizon", type=int, default=None, help="periods per epoch (N)")
    parser.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help="privacy budget per epoch (event-level); not with --target-std, which finds it",
    )
    parser.add_argument(
        "--rho",
        type=float,
        default=None,
        help=(
            "plan under rho-zCDP with discrete Gaussian noise instead of epsilon-DP: the zCDP "
            "budget per epoch; --sensitivity is then the L2 bound"
        ),
    )
    parser.add_argument(
        "--delta",
        type=float,
        default=None,
        help=(
            "the delta zCDP losses are also stated at as (epsilon, delta)-DP (default 1e-10); "
            "with --compare, compare both definitions at matched (--epsilon, --delta)"
        ),
    )
    parser.add_argument(
        "--l2-sensitivity",
        type=float,
        default=None,
        help=(
            "with --compare --delta: the L2 bound of one event for the zCDP rows (default "
            "--sensitivity, the L1 bound, which is never smaller)"
        ),
    )
    parser.add_argument(
        "--buffers",
        type=int,
        default=None,
        help=(
            "buffers d of the blt mechanism under --rho (default 3; its working state is "
            "2d + 1 numbers per counter)"
        ),
    )
    parser.add_argument(
        "--sensitivity",
        type=float,
        default=None,
        help=(
            "the sensitivity Delta (required without --config): the most one event changes "
            "the sum of the stream's counters in a period (under --rho the L2 bound: the most "
            "it moves the vector of the stream's counters, in L2 norm)"
        ),
    )
    parser.add_argument(
        "--max-events-per-period",
        type=int,
        default=None,
        metavar="A",
        help=(
            "plan per privacy unit (a patient, a device) instead of per event: at most A records "
            "of one unit count in a period (with --max-periods-per-epoch; the noise is then "
            "calibrated on M = A x max(B, 2) times --sensitivity, and a table shows what other "
            "bounds "
            "would cost)"
        ),
    )
    parser.add_argument(
        "--max-periods-per-epoch",
        type=int,
        default=None,
        metavar="B",
        help=(
            "with --max-events-per-period: one unit's records count in at most B periods of an "
            "epoch (1 <= B <= --horizon)"
        ),
    )
    parser.add_argument(
        "--noise",
        choices=NOISES,
        default=None,  # discrete-laplace; None tells a given --noise from the default
        help="noise distribution (default discrete-laplace, what the worker draws)",
    )
    parser.add_argument(
        "--target-std",
        type=float,
        default=None,
        metavar="COUNTS",
        help=(
            "answer with the smallest epsilon (3 significant digits) whose standard deviation "
            "is at most COUNTS: of the mean running total for objective total, the worst "
            "running total for minimax, the mean period count for count"
        ),
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="one row per mechanism and objective for this horizon, epsilon and sensitivity",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table (default) for people, json for programs",
    )
