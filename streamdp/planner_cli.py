"""``streamdp plan``: expected error of a continual counter before spending any budget."""

from __future__ import annotations

import argparse
import json
import math
import sys

from streamdp.continual.fda import OBJECTIVES
from streamdp.continual.strategy import MECHANISMS
from streamdp.continual.variance import NOISES
from streamdp.planner import Plan, plan


def register(parser: argparse.ArgumentParser) -> None:
    """Add the planner's arguments."""
    parser.add_argument("--mechanism", choices=MECHANISMS, default="fda")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="total",
        help="total: lowest average error; minimax: lowest worst-case error (fda only)",
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
    parser.add_argument("--format", choices=("table", "json"), default="table")


def render_table(result: Plan) -> str:
    """Human-readable summary with the 95% error bound of the running total at a few t."""
    lines = [
        (
            f"mechanism {result.mechanism}  objective {result.objective}  "
            f"horizon {result.horizon}  epsilon {result.epsilon:g}  "
            f"Delta {result.sensitivity:g}  noise {result.noise}"
        ),
        (
            f"running-total variance: mean {result.mean_variance:.6g}  "
            f"max {result.max_variance:.6g}  (std: mean-variance "
            f"{math.sqrt(result.mean_variance):.4g}, max {math.sqrt(result.max_variance):.4g}; "
            "units: counts)"
        ),
        "",
        f"{'t':>10}  {'std of total':>14}  {'95% error bound':>16}",
    ]
    lines += [f"{r.t:>10}  {r.total_std:>14.4g}  {r.error95:>16.4g}" for r in result.releases]
    lines.append("")
    lines.append(
        "95% bound: P(|noisy total - true total| <= bound) >= 0.95, from the exact noise "
        "distribution."
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the plan; bad values raise ConfigError (exit 2 from streamdp.cli)."""
    result = plan(
        args.mechanism, args.objective, args.horizon, args.epsilon, args.sensitivity, args.noise
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(result) + "\n")
    return 0
