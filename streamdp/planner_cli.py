"""``streamdp plan``: expected error of a continual counter before spending any budget.

One configuration from flags, or every stream of a spec (``--config``); ``--target-std`` turns
the question round and answers with the epsilon needed for a standard deviation.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from streamdp.continual.kary_config import KARY_OBJECTIVES
from streamdp.continual.strategy import ALL_MECHANISMS, objectives_for
from streamdp.continual.variance import NOISES
from streamdp.errors import ConfigError
from streamdp.planner import Plan, compare, epsilon_for_std, plan, planned_std

#: Flags that describe one configuration; --config takes all of them from the spec instead.
_CONFIGURATION_FLAGS = ("mechanism", "objective", "branching", "horizon", "epsilon", "sensitivity")


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
        choices=ALL_MECHANISMS,
        default=None,
        help="how the tree of noisy partial sums is laid out and weighted (default fda)",
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
        "--sensitivity",
        type=float,
        default=None,
        help=(
            "the sensitivity Delta (default 1): the most one event changes the sum of the "
            "stream's counters in a period"
        ),
    )
    parser.add_argument(
        "--noise",
        choices=NOISES,
        default="discrete-laplace",
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


def check_objective_flag(mechanism: str, objective: str) -> None:
    """Refuse ``--objective`` values that do not apply to ``--mechanism``
    (:func:`streamdp.planner.objectives_for` says which do)."""
    allowed = objectives_for(mechanism)
    if objective not in allowed:
        fixed = " (its weights are fixed)" if allowed == ("total",) else ""
        raise ConfigError(
            f"--objective {objective} does not apply to --mechanism {mechanism}{fixed}; "
            f"it takes {' or '.join(allowed)}"
        )


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
            f"sensitivity {result.sensitivity:g}  noise {result.noise}"
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
            f"horizon {first.horizon}  epsilon {first.epsilon:g}  "
            f"sensitivity {first.sensitivity:g}  noise {first.noise}  (variances in counts^2)"
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


@dataclass(frozen=True)
class StreamPlan:
    """The plan of one stream of a spec (``target_epsilon`` set under ``--target-std``)."""

    stream: str
    plan: Plan
    target_epsilon: Decimal | None = None

    def as_dict(self) -> dict[str, Any]:
        data = {"stream": self.stream, **self.plan.as_dict()}
        data["period_count_std"] = math.sqrt(self.plan.mean_count_variance)
        if self.target_epsilon is not None:
            data["epsilon_for_target"] = str(self.target_epsilon)
            data["planned_std"] = planned_std(self.plan)
        return data


def render_streams(rows: list[StreamPlan], target: float | None) -> str:
    """One row per stream: mechanism, horizon, epsilon, sensitivity, standard deviations."""
    head = (
        f"{'stream':<22} {'mechanism':<18} {'N':>6} {'epsilon':>8} {'sens.':>5} "
        f"{'mean std':>9} {'max std':>9} {'count std':>9}"
    )
    lines = [head]
    for row in rows:
        r = row.plan
        mechanism = r.mechanism if r.objective == "total" else f"{r.mechanism}/{r.objective}"
        lines.append(
            f"{row.stream:<22} {mechanism:<18} {r.horizon:>6} {r.epsilon:>8.4g} "
            f"{r.sensitivity:>5g} {math.sqrt(r.mean_variance):>9.4g} "
            f"{math.sqrt(r.max_variance):>9.4g} {math.sqrt(r.mean_count_variance):>9.4g}"
        )
    lines.append("")
    if target is not None:
        lines += [
            "epsilon: per epoch (event-level), the smallest with 3 digits for a standard",
            f"deviation of at most {target:g} (of the mean running total; the worst one for",
            "minimax; the mean period count for count); the other columns are at that epsilon",
        ]
    else:
        lines += [
            "epsilon: per epoch (event-level); standard deviations in counts: mean and max over",
            "the horizon of the running total's, mean of the period count's",
        ]
    return "\n".join(lines)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


def _run_config(args: argparse.Namespace) -> int:
    from streamdp.engine import load_spec

    clashing = _given(args, _CONFIGURATION_FLAGS)
    if clashing:
        raise ConfigError(
            f"--config plans each stream with the spec's own values; drop {', '.join(clashing)}"
        )
    spec = load_spec(args.config)
    if args.compare:
        if args.target_std is not None:
            raise ConfigError("--compare and --target-std answer different questions; pick one")
        out: list[str] = []
        data: dict[str, Any] = {}
        for name, stream in spec.streams.items():
            results = compare(
                stream.horizon, float(stream.epsilon), float(stream.sensitivity), args.noise
            )
            data[name] = [r.as_dict() for r in results]
            out += [f"stream {name}", render_comparison(results), ""]
        text = json.dumps(data, indent=2) if args.format == "json" else "\n".join(out).rstrip()
        sys.stdout.write(text + "\n")
        return 0
    rows: list[StreamPlan] = []
    for name, stream in spec.streams.items():
        if args.target_std is None:
            result = plan(
                stream.mechanism,
                stream.objective,
                stream.horizon,
                float(stream.epsilon),
                float(stream.sensitivity),
                args.noise,
                branching=stream.branching,
            )
            rows.append(StreamPlan(name, result))
        else:
            epsilon, result = epsilon_for_std(
                args.target_std,
                stream.mechanism,
                stream.objective,
                stream.horizon,
                float(stream.sensitivity),
                args.noise,
                branching=stream.branching,
            )
            rows.append(StreamPlan(name, result, epsilon))
    if args.format == "json":
        sys.stdout.write(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
    else:
        sys.stdout.write(render_streams(rows, args.target_std) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the plan (or the comparison, or the epsilon for a target); bad values raise
    ConfigError (one line, exit 2)."""
    if args.config is not None:
        return _run_config(args)
    if args.horizon is None:
        raise ConfigError("--horizon is required (or --config SPEC.toml to plan a spec's streams)")
    sensitivity = 1.0 if args.sensitivity is None else args.sensitivity
    if args.compare:
        clashing = _given(args, ("mechanism", "objective", "branching", "target_std"))
        if clashing:
            raise ConfigError(f"--compare plans every mechanism; drop {', '.join(clashing)}")
        if args.epsilon is None:
            raise ConfigError("--compare needs --epsilon")
        results = compare(args.horizon, args.epsilon, sensitivity, args.noise)
        if args.format == "json":
            sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
        else:
            sys.stdout.write(render_comparison(results) + "\n")
        return 0
    mechanism = "fda" if args.mechanism is None else args.mechanism
    objective = "total" if args.objective is None else args.objective
    check_objective_flag(mechanism, objective)
    if args.target_std is not None:
        if args.epsilon is not None:
            raise ConfigError("--target-std finds the epsilon; drop --epsilon")
        epsilon, result = epsilon_for_std(
            args.target_std,
            mechanism,
            objective,
            args.horizon,
            sensitivity,
            args.noise,
            branching=args.branching,
        )
        if args.format == "json":
            data = {**result.as_dict(), "epsilon_for_target": str(epsilon)}
            data["planned_std"] = planned_std(result)
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
        else:
            measure = {"minimax": "worst running total", "count": "mean period count"}.get(
                result.objective, "mean running total"
            )
            sys.stdout.write(
                f"epsilon per epoch needed: {epsilon} (standard deviation of the {measure} "
                f"{planned_std(result):.4g} <= {args.target_std:g}; 3 significant digits, "
                "rounded up)\n\n" + render_table(result) + "\n"
            )
        return 0
    if args.epsilon is None:
        raise ConfigError("--epsilon is required (or --target-std COUNTS to find it)")
    result = plan(
        mechanism,
        objective,
        args.horizon,
        args.epsilon,
        sensitivity,
        args.noise,
        branching=args.branching,
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(result) + "\n")
    return 0
