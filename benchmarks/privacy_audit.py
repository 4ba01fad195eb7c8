"""Empirical privacy audit of the release engine: a lower bound on epsilon from many trials.

    ./run bench privacy_audit [--trials 50000] [--epsilon 1.0] [--quick]

Two neighbouring inputs go through the real engine path (spec, ingest, public clock, OpenDP's
secure discrete Laplace): D and D' = D plus one hostile record, in three variants of that
record (a plain extra event, the same event stamped 24 days ahead and arriving first, and a
record reusing another's id with other content). Each trial builds a fresh engine, so every
trial draws fresh noise.

The distinguishing event is the strongest one for this mechanism: with horizon N = 4, the
extra record's period 1 is covered by Fenwick nodes 1, 2 and 4, whose noisy values are exactly
the released running totals at t = 1, 2, 4. E = "every one of them is at least its value under
D' " has probability ratio exactly exp(sum over those nodes of Delta/scale) <= exp(epsilon)
under the discrete Laplace, so the audit is tight: its estimate should sit just below epsilon
and never above it. We report Clopper-Pearson 95% bounds on P_D(E) and P_D'(E) and the lower
bound eps_low = ln(p'_low / p_up), the largest epsilon the trials prove; privacy holds if
eps_low <= epsilon for every variant. A broken engine (for instance the old event-time
watermark, where the forged record pushed out whole periods) gives an eps_low far above epsilon.

It also runs the floating-point attack of issue 25 (``float_attack.py``: a one-flag kary_gls
stream whose released floats an attacker searches bit for bit) with ``--float-trials`` runs per
side, and reports its lower bound beside the others.

Writes privacy_audit.md (with the command that produced it) to benchmarks/out/ (with --write:
the committed benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from results_dir import add_write_flag, output_dir
from scipy.stats import beta

from streamdp.engine import Engine, parse_spec
from streamdp.noise import production_sampler

START = 1704067200  # 2024-01-01T00:00:00Z
SPEC = """
[sources.people]
topic = "people"
kind = "person"
epsilon_cap = "{epsilon}"

[streams.flags]
source = "people"
epsilon = "{epsilon}"
sensitivity = 1
horizon = 4
mechanism = "fda"
period = {{ unit = "fixed", start = "2024-01-01T00:00:00Z", length = 3600 }}
counters = {{ kind = "flag", field = "hiv_positive", name = "positives" }}
"""
NODES_OF_PERIOD_1 = (1, 2, 4)  # the Fenwick nodes covering period 1 (update chain of 1)


def _event(event_id: str, hour: float, positive: bool = True) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_time": START + 3600 * hour,
        "attributes": {"hiv_positive": positive},
    }


BASE = [
    _event("a", 0.2),
    _event("b", 0.5),
    _event("c", 1.3),
    _event("d", 2.1),
    _event("e", 3.7),
    _event("f", 0.9, positive=False),
]
VARIANTS: dict[str, list[dict[str, Any]]] = {
    # one extra positive admission in period 1
    "extra event": [*BASE, _event("x", 0.7)],
    # the audit's attack on the old design: stamped 24 days ahead, first in the input
    "forged far-future record first": [_event("forged", 24 * 24 + 0.5), *BASE],
    # reuses event id "f" with other content, arriving before it
    "reused id, other content, first": [_event("f", 0.9, positive=True), *BASE],
}


def totals(spec: Any, records: list[dict[str, Any]]) -> dict[int, int]:
    """One run: the released noisy running totals by period (fresh secure noise)."""
    engine = Engine(spec, sampler=production_sampler(), batch=True)
    as_of = START + 4 * 3600.0
    engine.start_batch(as_of)
    for record in records:
        engine.ingest(json.dumps(record))
    return {
        r.period: r.noisy_total for r in engine.advance_clock(as_of) if hasattr(r, "noisy_total")
    }


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def audit(spec: Any, neighbour: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    # the true totals under D' at the period-1 nodes' read points (t = 1, 2, 4)
    truth_d1 = {t: sum(1 for r in neighbour if _counts(r, t)) for t in NODES_OF_PERIOD_1}
    hits = {"D": 0, "D1": 0}
    started = time.perf_counter()
    for name, records in (("D", BASE), ("D1", neighbour)):
        for _ in range(trials):
            released = totals(spec, records)
            if all(released[t] >= truth_d1[t] for t in NODES_OF_PERIOD_1):
                hits[name] += 1
    seconds = time.perf_counter() - started
    _, high_d = clopper_pearson(hits["D"], trials)
    low_d1, _ = clopper_pearson(hits["D1"], trials)
    point = math.log(hits["D1"] / hits["D"]) if hits["D"] and hits["D1"] else float("nan")
    lower = math.log(low_d1 / high_d) if low_d1 > 0 else float("-inf")
    return {
        "p_D": hits["D"] / trials,
        "p_D1": hits["D1"] / trials,
        "eps_point": point,
        "eps_low": lower,
        "seconds": seconds,
    }


def _counts(record: dict[str, Any], t: int) -> bool:
    """Whether ``record`` is a positive admission in periods 1..t that the engine counts."""
    hour = (record["event_time"] - START) / 3600
    return bool(record["attributes"].get("hiv_positive")) and 0 <= hour < t


def _verdict(within: bool, audited: bool) -> str:
    """The table's last column: the audited rule must stay within epsilon; the old rule, run on
    the same draws to show that the attack has power, is expected not to."""
    if within:
        return "yes"
    return "**NO**" if audited else "no (the old rule: the attack has power)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trials", type=int, default=50_000, help="trials per side (default 50000)"
    )
    parser.add_argument(
        "--epsilon", type=float, default=1.0, help="the stream's epsilon (default 1)"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 trials (a smoke run)")
    parser.add_argument(
        "--float-trials",
        type=int,
        default=3000,
        help="runs per side of the floating-point attack (default 3000; 0 skips it)",
    )
    add_write_flag(parser)
    args = parser.parse_args()
    trials = 2_000 if args.quick else args.trials
    spec = parse_spec(SPEC.format(epsilon=args.epsilon))
    rows = []
    for name, neighbour in VARIANTS.items():
        result = audit(spec, neighbour, trials)
        rows.append((name, result))
        print(
            f"{name:34s} P_D(E) {result['p_D']:.4f}  P_D'(E) {result['p_D1']:.4f}  "
            f"eps point {result['eps_point']:.3f}  eps_low {result['eps_low']:.3f}  "
            f"({result['seconds']:.0f} s)"
        )
    float_rows = []
    if args.float_trials:
        import float_attack  # benchmarks/ is on sys.path when a benchmark runs

        outcomes = float_attack.attack(
            float_attack.Attacker.build(25.0), args.float_trials, production_sampler()
        )
        labels = {
            "today": "float attack on kary_gls releases",
            "previous": "same attack, same draws, the release rule of issue 25's main",
        }
        for pipeline, label in labels.items():
            outcome = outcomes[pipeline]
            bound = outcome.epsilon_lower_bound()
            shown = f"{bound:.3f}" if math.isfinite(bound) else "none (no run told apart)"
            float_rows.append(
                f"| {label} ({args.float_trials:,} runs per side; P = share of runs whose "
                f"floats prove the record present) "
                f"| {outcome.proved['D'] / outcome.trials['D']:.4f} "
                f"| {outcome.proved[float_attack.PRIME] / outcome.trials[float_attack.PRIME]:.4f}"
                f" | | {shown} | {_verdict(bound <= args.epsilon, pipeline == 'today')} |"
            )
            print(float_rows[-1])
    command = "./run bench privacy_audit" + (" --quick" if args.quick else f" --trials {trials}")
    command += f" --float-trials {args.float_trials}"
    lines = [
        "# Empirical privacy audit",
        "",
        (
            f"Command: `{command}` (epsilon = {args.epsilon}, {trials:,} trials per side, "
            "OpenDP's secure discrete Laplace, every trial a fresh engine through ingest and the "
            "public clock)."
        ),
        "",
        (
            "Event E: the released running totals at t = 1, 2, 4 (the noisy Fenwick nodes "
            "covering period 1) are all at least their values under D'. Its probability ratio is "
            "exactly exp(sum of Delta/scale over those nodes) <= exp(epsilon), so the audit is "
            "tight."
        ),
        "",
        (
            "| neighbour D' = D + | P_D(E) | P_D'(E) | eps (point) | eps lower bound (95% CP) "
            "| within epsilon |"
        ),
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, r in rows:
        ok = "yes" if r["eps_low"] <= args.epsilon else "**NO**"
        lines.append(
            f"| {name} | {r['p_D']:.4f} | {r['p_D1']:.4f} | {r['eps_point']:.3f} | "
            f"{r['eps_low']:.3f} | {ok} |"
        )
    lines += float_rows
    lines += [
        "",
        (
            "The point estimates sit near epsilon where the record counts (the event is the worst "
            "case) and near 0 where it cannot (a record far ahead of the release), and the 95% "
            "lower bounds stay below epsilon: the trials prove no privacy loss above the claimed "
            "epsilon. Before the public-clock redesign a forged far-future record made every "
            "earlier period's events late; the auditor's attack then showed eps >= 6.0 for a "
            "claimed 1 (issue 11)."
        ),
        *(
            [
                "",
                (
                    "The float attack (benchmarks/float_attack.py) releases a one-flag kary_gls "
                    "stream (horizon 2, k = 2) and searches the released floats for the integer "
                    "noise each hypothesis needs: a release that only D' explains proves the "
                    "record present. The second row judges the same noise draws as issue 25's "
                    "main released them (exact total + float(decoded noise)): the attack's "
                    "power; the first, today's releases, functions of the noisy node values "
                    "alone."
                ),
            ]
            if float_rows
            else []
        ),
        f"Median seconds per variant: {statistics.median(r['seconds'] for _, r in rows):.0f}.",
        "",
    ]
    target = output_dir(args.write) / "privacy_audit.md"
    target.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
