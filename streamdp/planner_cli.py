"""``streamdp plan``: expected error of a continual counter before spending any budget."""

from __future__ import annotations

import argparse
import json
import math
import sys

from streamdp.continual.kary import KARY_OBJECTIVES
from streamdp.continual.strategy import ALL_MECHANISMS
from streamdp.continual.variance import NOISES
from streamdp.errors import ConfigError
from streamdp.planner import Plan, compare, plan


def register(parser: argparse.ArgumentParser) -> None:
    """Add the planner's arguments."""
    parser.add_argument("--mechanism", choices=ALL_MECHANISMS, default="fda")
    parser.add_argument(
        "--objective",
        choices=KARY_OBJECTIVES,
        default="total",
        help=(
            "total: lowest average error of running totals; minimax: lowest worst-case error "
            "(fda, kary_*); count: lowest period-count error (kary_* only); binary and naive "
            "ignore it"
        ),
    )
    parser.add_argument(
        "--branching",
        type=int,
        default=None,
        help="k of the k-ary mechanisms (default: chosen for the objective and horizon)",
    )
    parser.add_argument("--horizon", type=int, required=True, help="periods per epoch (N)")
    parser.add_argument("--epsilon", type=float, required=True, help="privacy budget per epoch")
    parser.add_argument(
        "--sensitivity",
        type=float,
        default=1.0,
        help="Delta: the most one event changes the sum of the stream's counters in a period",
    )
    parser.add_argument("--noise", choices=NOISES, default="discrete-laplace")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="one row per mechanism and objective for this horizon, epsilon and Delta",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")


def _describe(result: Plan) -> str:
    if result.branching is None:
        return result.mechanism
    budgets = "/".join(f"{b:.3f}" for b in result.level_budgets)
    return f"{result.mechanism} (k={result.branching}, level budgets {budgets})"


def render_table(result: Plan) -> str:
    """Human-readable summary with the 95% error bound of the running total at a few t."""
    lines = [
        (
            f"mechanism {_describe(result)}  objective {result.objective}  "
            f"horizon {result.horizon}  epsilon {result.epsilon:g}  "
            f"Delta {result.sensitivity:g}  noise {result.noise}"
        ),
        (
            f"running-total variance: mean {result.mean_variance:.6g}  "
            f"max {result.max_variance:.6g}  (std: mean-variance "
            f"{math.sqrt(result.mean_variance):.4g}, max {math.sqrt(result.max_variance):.4g}; "
            "units: counts)"
        ),
        (
            f"period-count variance: mean {result.mean_count_variance:.6g}  "
            f"max {result.max_count_variance:.6g}"
        ),
        f"stored noisy values per counter per epoch: {result.state_values_per_counter}",
        "",
        f"{'t':>10}  {'std of total':>14}  {'95% error bound':>16}",
    ]
    lines += [f"{r.t:>10}  {r.total_std:>14.4g}  {r.error95:>16.4g}" for r in result.releases]
    lines.append("")
    lines.append(
        "95% bound: P(|noisy total - true total| <= bound) >= 0.95, from the exact noise "
        "distribution (normal quantile when more than 64 nodes are combined)."
    )
    return "\n".join(lines)


def render_comparison(results: list[Plan]) -> str:
    """One row per mechanism: running-total and period-count variances, state per counter."""
    first = results[0]
    lines = [
        (
            f"horizon {first.horizon}  epsilon {first.epsilon:g}  Delta {first.sensitivity:g}  "
            f"noise {first.noise}  (variances in counts^2)"
        ),
        "",
        (
            f"{'mechanism':<13} {'objective':<9} {'k':>3} {'mean total':>12} {'max total':>12} "
            f"{'mean count':>12} {'stored/counter':>15}"
        ),
    ]
    for r in results:
        k = "" if r.branching is None else str(r.branching)
        lines.append(
            f"{r.mechanism:<13} {r.objective:<9} {k:>3} {r.mean_variance:>12.6g} "
            f"{r.max_variance:>12.6g} {r.mean_count_variance:>12.6g} "
            f"{r.state_values_per_counter:>15}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the plan (or the comparison); bad values raise ConfigError (exit 2)."""
    if args.compare:
        results = compare(args.horizon, args.epsilon, args.sensitivity, args.noise)
        if args.format == "json":
            sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
        else:
            sys.stdout.write(render_comparison(results) + "\n")
        return 0
    if args.mechanism in ("binary", "naive") and args.objective != "total":
        raise ConfigError(
            f"--objective {args.objective} does not apply to --mechanism {args.mechanism} "
            "(its weights are fixed); objectives choose the weights of fda and kary_*"
        )
    result = plan(
        args.mechanism,
        args.objective,
        args.horizon,
        args.epsilon,
        args.sensitivity,
        args.noise,
        branching=args.branching,
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(result) + "\n")
    return 0
