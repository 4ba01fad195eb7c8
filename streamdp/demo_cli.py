"""``streamdp demo`` (temporary): an accuracy demo until the live Kafka demo replaces it.

Prints the planner for the three seed scenarios and runs a small simulated FDA counter with the
INSECURE seeded sampler (labelled as such), comparing its releases with the true totals.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from streamdp.continual import ContinualCounter, build_strategy
from streamdp.noise.insecure import InsecureSeededSampler
from streamdp.planner import plan

SCENARIOS = (
    ("restaurant orders, daily", 365, 5.0),
    ("census-style records, daily", 365, 5.0),
    ("HIV admissions, monthly", 120, 1.0),
)


def register(parser: argparse.ArgumentParser) -> None:
    """Add the demo's arguments."""
    parser.add_argument("--epsilon", type=float, default=1.0, help="budget per epoch")
    parser.add_argument("--seed", type=int, default=1, help="seed of the INSECURE demo sampler")


def run(args: argparse.Namespace) -> int:
    """Print the planner table and a short simulated run."""
    out = sys.stdout.write
    out(
        "streamdp accuracy demo (the live Kafka demo will replace this command)\n\n"
        f"Expected error of the running total, epsilon = {args.epsilon:g} per epoch:\n"
        f"{'scenario':<30}{'N':>6}{'Delta':>7}{'fda std':>10}{'binary std':>12}"
        f"{'naive std':>11}{'fda 95% @N':>12}\n"
    )
    for name, horizon, delta in SCENARIOS:
        stds = {}
        for mechanism in ("fda", "binary", "naive"):
            p = plan(mechanism, "total", horizon, args.epsilon, delta)
            stds[mechanism] = p.mean_variance**0.5
        fda = plan("fda", "total", horizon, args.epsilon, delta, points=[horizon])
        out(
            f"{name:<30}{horizon:>6}{delta:>7g}{stds['fda']:>10.1f}{stds['binary']:>12.1f}"
            f"{stds['naive']:>11.1f}{fda.releases[0].error95:>12.0f}\n"
        )
    out("(std = root of the running-total variance averaged over t = 1..N; counts)\n\n")

    horizon, width = 12, 3
    out(
        f"Simulated FDA counter, {width} counters, N = {horizon}, Delta = 5 -- noise from the "
        f"INSECURE seeded sampler (seed {args.seed}), for demonstration only:\n"
        f"{'t':>3}  {'true totals':>22}  {'noisy totals':>22}  {'std':>6}\n"
    )
    lanes = np.arange(width, dtype=np.int64)
    counter = ContinualCounter(
        build_strategy("fda", "total", horizon),
        args.epsilon,
        5.0,
        width,
        InsecureSeededSampler(args.seed),
    )
    truth = np.zeros(width, dtype=np.int64)
    for t in range(1, horizon + 1):
        counts = 30 + (7 * t + 13 * lanes) % 23  # deterministic synthetic counts
        truth += counts
        release = counter.close_period(counts)
        out(
            f"{t:>3}  {' '.join(f'{v:>6d}' for v in truth):>22}  "
            f"{' '.join(f'{v:>6d}' for v in release.noisy_total):>22}  {release.total_std:>6.1f}\n"
        )
    return 0
