"""``streamdp plan``: expected error of a continual counter before spending any budget.

One configuration from flags, or every stream of a spec (``--config``, planned by
:mod:`streamdp.planner.spec_plan`); ``--target-std`` turns the question round and answers with
the epsilon needed for a standard deviation.
``--max-events-per-period A --max-periods-per-epoch B`` (a spec's ``privacy_unit``) plans per
privacy unit: the noise calibrated on ``M = A x max(B, 2)`` times one event's sensitivity, with
a table of what other bounds would cost (:mod:`streamdp.planner.unit_cost`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable

from streamdp.continual.strategy import ALL_MECHANISMS, objectives_for
from streamdp.engine.privacy_unit import unit_multiplier
from streamdp.errors import ConfigError
from streamdp.planner.accuracy import Plan, compare, plan
from streamdp.planner.flags import CONFIGURATION_FLAGS, register
from streamdp.planner.report import render_comparison, render_table
from streamdp.planner.spec_plan import compare_spec, plan_spec
from streamdp.planner.target import epsilon_for_std, planned_std
from streamdp.planner.unit_cost import describe_unit, render_unit_costs, unit_costs, unit_summary
from streamdp.planner.zcdp import compare_definitions, plan_zcdp

__all__ = ["register", "run"]  # what streamdp.cli calls; the flags are in planner.flags


def check_objective_flag(mechanism: str, objective: str) -> None:
    """Refuse ``--objective`` values that do not apply to ``--mechanism``
    (:func:`streamdp.continual.strategy.objectives_for` says which do)."""
    allowed = objectives_for(mechanism)
    if objective not in allowed:
        fixed = " (its weights are fixed)" if allowed == ("total",) else ""
        raise ConfigError(
            f"--objective {objective} does not apply to --mechanism {mechanism}{fixed}; "
            f"it takes {' or '.join(allowed)}"
        )


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


def _unit_bounds(args: argparse.Namespace) -> tuple[int, int] | None:
    """``(A, B)`` of ``--max-events-per-period A --max-periods-per-epoch B`` (both or neither;
    integers >= 1, B at most the horizon), None when neither is given: per event."""
    per_period, periods = args.max_events_per_period, args.max_periods_per_epoch
    if per_period is None and periods is None:
        return None
    both = (
        "a privacy unit bounds both the records per period and the periods per epoch one unit "
        "may contribute"
    )
    if periods is None:
        raise ConfigError(f"--max-events-per-period needs --max-periods-per-epoch: {both}")
    if per_period is None:
        raise ConfigError(f"--max-periods-per-epoch needs --max-events-per-period: {both}")
    for flag, value in (
        ("--max-events-per-period", per_period),
        ("--max-periods-per-epoch", periods),
    ):
        if value < 1:
            raise ConfigError(f"{flag} must be an integer >= 1, got {value}")
    if args.horizon >= 1 and periods > args.horizon:
        raise ConfigError(
            f"--max-periods-per-epoch {periods} is more than the {args.horizon} periods of an "
            f"epoch (--horizon); at most {args.horizon}"
        )
    return per_period, periods


def _unit_multiplier(bounds: tuple[int, int] | None) -> int:
    """``M = A x max(B, 2)`` (:func:`~streamdp.engine.privacy_unit.unit_multiplier`; 1 per
    event)."""
    return 1 if bounds is None else unit_multiplier(*bounds)


def _unit_text(bounds: tuple[int, int] | None, event_sensitivity: float, *, l2: bool) -> str:
    """The words before a unit-level plan (empty per event)."""
    if bounds is None:
        return ""
    return describe_unit(*bounds, event_sensitivity, l2=l2) + "\n\n"


def _write_plan(
    result: Plan,
    args: argparse.Namespace,
    bounds: tuple[int, int] | None,
    plan_at: Callable[[int], Plan],
    *,
    l2: bool = False,
) -> None:
    """Print ``result``; at privacy-unit ``bounds`` (its noise on ``M`` times
    ``args.sensitivity``), with what they mean and the cost of alternative bounds, each planned
    by ``plan_at(M)``."""
    costs = [] if bounds is None else unit_costs(plan_at, *bounds, args.horizon)
    if args.format == "json":
        data = result.as_dict()
        if bounds is not None:
            data["privacy_unit"] = unit_summary(*bounds, args.sensitivity)
            data["unit_costs"] = [c.as_dict() for c in costs]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    text = _unit_text(bounds, args.sensitivity, l2=l2) + render_table(result)
    if bounds is not None:
        text += "\n\n" + render_unit_costs(costs)
    sys.stdout.write(text + "\n")


def _run_config(args: argparse.Namespace, *, noise_given: bool) -> int:
    from streamdp.engine import load_spec

    clashing = _given(args, CONFIGURATION_FLAGS)
    if clashing:
        raise ConfigError(
            f"--config plans each stream with the spec's own values; drop {', '.join(clashing)}"
        )
    spec = load_spec(args.config)
    if noise_given and all(s.rho is not None for s in spec.streams.values()):
        raise ConfigError(
            f"--noise applies to pure-epsilon streams; every stream of {args.config!r} is zCDP "
            f"(discrete Gaussian noise): drop --noise {args.noise}"
        )
    if args.compare:
        if args.target_std is not None:
            raise ConfigError("--compare and --target-std answer different questions; pick one")
        text = compare_spec(spec, args.noise, args.format)
    else:
        text = plan_spec(spec, args.noise, args.format, args.target_std)
    sys.stdout.write(text + "\n")
    return 0


def _run_zcdp(
    args: argparse.Namespace, bounds: tuple[int, int] | None, *, noise_given: bool
) -> int:
    """``plan --rho``: one zCDP counter (:func:`streamdp.planner.zcdp.plan_zcdp`); at
    privacy-unit ``bounds``, on ``M`` times the L2 bound ``--sensitivity``."""
    clashing = _given(args, ("epsilon", "target_std"))
    if noise_given:
        clashing.append("--noise")
    if clashing:
        raise ConfigError(
            f"--rho plans a zCDP counter with discrete Gaussian noise; drop {', '.join(clashing)}"
        )
    if args.l2_sensitivity is not None:
        raise ConfigError(
            "under --rho, --sensitivity is the L2 bound; give it there and drop "
            "--l2-sensitivity (that flag is for --compare --delta, whose --sensitivity is L1)"
        )
    mechanism = "blt" if args.mechanism is None else args.mechanism
    if args.buffers is not None and mechanism != "blt":
        raise ConfigError(f"--buffers applies to --mechanism blt only, not {mechanism}")
    objective = "total" if args.objective is None else args.objective

    def plan_at(multiplier: int) -> Plan:
        return plan_zcdp(
            mechanism,
            objective,
            args.horizon,
            args.rho,
            args.sensitivity,
            delta=1e-10 if args.delta is None else args.delta,
            branching=args.branching,
            buffers=3 if args.buffers is None else args.buffers,
            unit_multiplier=multiplier,
        )

    result = plan_at(_unit_multiplier(bounds))
    _note_snapped_l2("--sensitivity", args.sensitivity)
    _write_plan(result, args, bounds, plan_at, l2=True)
    return 0


def _run_compare(args: argparse.Namespace, bounds: tuple[int, int] | None) -> int:
    """``plan --compare``: one row per mechanism and objective, under pure epsilon or (with
    ``--delta``) both definitions at matched (epsilon, delta)."""
    multiplier = _unit_multiplier(bounds)
    sensitivity = args.sensitivity * multiplier  # per unit (M x Delta), or per event
    clashing = _given(args, ("mechanism", "objective", "branching", "target_std"))
    if clashing:
        raise ConfigError(f"--compare plans every mechanism; drop {', '.join(clashing)}")
    if args.epsilon is None or args.rho is not None:
        raise ConfigError(
            "--compare needs --epsilon (with --delta, the zCDP mechanisms are compared at "
            "the rho matching (epsilon, delta); --rho is not taken)"
        )
    if args.delta is None:
        if args.l2_sensitivity is not None:
            raise ConfigError("--l2-sensitivity applies to --compare with --delta only")
        results = compare(args.horizon, args.epsilon, sensitivity, args.noise)
    else:
        if args.noise != "discrete-laplace":
            raise ConfigError(
                "--compare --delta compares what the worker runs (discrete Laplace for the pure "
                f"rows); drop --noise {args.noise}"
            )
        l2 = args.sensitivity if args.l2_sensitivity is None else args.l2_sensitivity
        if l2 > args.sensitivity:
            raise ConfigError(
                f"--l2-sensitivity {l2:g} is above the L1 bound --sensitivity "
                f"{args.sensitivity:g}: one event's L2 change is never more than its L1 change"
            )
        results = compare_definitions(
            args.horizon, args.epsilon, sensitivity, l2, args.delta, unit_multiplier=multiplier
        )
        _note_snapped_l2(
            "--l2-sensitivity" if args.l2_sensitivity is not None else "--sensitivity", l2
        )
    if args.format == "json":
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
    else:
        text = _unit_text(bounds, args.sensitivity, l2=False) + render_comparison(results)
        sys.stdout.write(text + "\n")
    return 0


def _run_target(
    args: argparse.Namespace, bounds: tuple[int, int] | None, mechanism: str, objective: str
) -> int:
    """``plan --target-std``: the smallest epsilon whose standard deviation meets the target."""
    multiplier = _unit_multiplier(bounds)
    sensitivity = args.sensitivity * multiplier  # per unit (M x Delta), or per event
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
        if bounds is not None:
            data["privacy_unit"] = unit_summary(*bounds, args.sensitivity)
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        measure = {"minimax": "worst running total", "count": "mean period count"}.get(
            result.objective, "mean running total"
        )
        sys.stdout.write(
            _unit_text(bounds, args.sensitivity, l2=False)
            + f"epsilon per epoch needed: {epsilon} (standard deviation of the {measure} "
            f"{planned_std(result):.4g} <= {args.target_std:g}; 3 significant digits, "
            "rounded up)\n\n" + render_table(result) + "\n"
        )
    return 0


def _note_snapped_l2(flag: str, value: float) -> None:
    """Say on stderr when an L2 bound is planned as a smaller root of an integer (one event's
    changes are integers, so their squared norm is: 2.236 plans as sqrt 4 = 2, not sqrt 5)."""
    from streamdp.planner.zcdp import l2_squared_of

    squared = l2_squared_of(value)
    if math.isclose(math.sqrt(squared), value, rel_tol=1e-9):
        return
    above = math.ceil(math.sqrt(squared + 1) * 1e5) / 1e5
    sys.stderr.write(
        f"streamdp plan: note: {flag} {value:g} planned as the L2 bound sqrt({squared}) = "
        f"{math.sqrt(squared):.6g} (an event's changes are integers, so its squared L2 norm is "
        f"an integer); for sqrt({squared + 1}) give {above:g}\n"
    )


def _check_sensitivities(args: argparse.Namespace) -> None:
    """Both bounds finite and at most 2^40 (what a spec accepts; NaN and inf were tracebacks,
    1e200 overflowed a variance); the lower limits have their own messages below."""
    from streamdp.continual.privacy import MAX_SENSITIVITY

    for flag, value in (
        ("--sensitivity", args.sensitivity),
        ("--l2-sensitivity", args.l2_sensitivity),
    ):
        if value is not None and not (math.isfinite(value) and value <= MAX_SENSITIVITY):
            raise ConfigError(f"{flag} must be a number from 1 to 2^40, got {value:g}")


def run(args: argparse.Namespace) -> int:
    """Print the plan (or the comparison, or the epsilon for a target); bad values raise
    ConfigError (one line, exit 2)."""
    noise_given = args.noise is not None
    args.noise = args.noise or "discrete-laplace"
    if args.config is not None:
        return _run_config(args, noise_given=noise_given)
    if args.horizon is None:
        raise ConfigError("--horizon is required (or --config SPEC.toml to plan a spec's streams)")
    if args.sensitivity is None:
        raise ConfigError(
            "--sensitivity is required: the most one event changes the sum of the stream's "
            "counters in a period (1 for a flag; k + 2 for a census record with k attributes; "
            "the largest combo for restaurant orders), or --config SPEC.toml to plan a spec's"
        )
    _check_sensitivities(args)
    bounds = _unit_bounds(args)
    if args.rho is not None and not args.compare:
        return _run_zcdp(args, bounds, noise_given=noise_given)
    if args.buffers is not None:
        raise ConfigError("--buffers applies to --rho --mechanism blt only")
    if args.sensitivity != int(args.sensitivity) or args.sensitivity < 1:
        raise ConfigError(
            f"--sensitivity is the L1 bound Delta of a spec, an integer >= 1 (one event's "
            f"changes to the stream's counters summed); got {args.sensitivity:g}"
        )
    if args.compare:
        return _run_compare(args, bounds)
    if args.delta is not None or args.l2_sensitivity is not None:
        raise ConfigError(
            "--delta applies under --rho or with --compare, --l2-sensitivity with --compare "
            "--delta only"
        )
    mechanism = "fda" if args.mechanism is None else args.mechanism
    if mechanism not in ALL_MECHANISMS:
        raise ConfigError(
            f"--mechanism {mechanism} is a zCDP counter (discrete Gaussian noise): give --rho "
            "instead of --epsilon"
        )
    objective = "total" if args.objective is None else args.objective
    check_objective_flag(mechanism, objective)
    if args.target_std is not None:
        return _run_target(args, bounds, mechanism, objective)
    if args.epsilon is None:
        raise ConfigError("--epsilon is required (or --target-std COUNTS to find it)")

    def plan_at(unit_multiplier: int) -> Plan:
        return plan(
            mechanism,
            objective,
            args.horizon,
            args.epsilon,
            args.sensitivity * unit_multiplier,
            args.noise,
            branching=args.branching,
        )

    _write_plan(plan_at(_unit_multiplier(bounds)), args, bounds, plan_at)
    return 0
