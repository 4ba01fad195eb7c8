"""The two large consistency runs: 10^6 days x 5 items (seed 004 Fig. 4) and 449,814 regions x
322 cells (seed 000's Census2010 size, synthetic data). One case per process so that the peak
RSS (resource.getrusage) belongs to that case alone.

    .venv/bin/python benchmarks/consistency_large.py restaurant-exact
    .venv/bin/python benchmarks/consistency_large.py restaurant-approx
    .venv/bin/python benchmarks/consistency_large.py census-exact
    .venv/bin/python benchmarks/consistency_large.py census-fgmc

Each writes consistency_large_<case>.json to benchmarks/out/ (with --write: the committed
benchmarks/results/). The case is required (no default: all four in one process would
mix their peak RSS, and census-fgmc alone peaks near 10 GB). The data are drawn once and the
solve is timed ``--repeats`` times on them (median, min and max of the seconds; the peak RSS is
the process's over every repeat); the JSON records the date, commit and load average
(``run_conditions``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from results_dir import add_write_flag, output_dir
from run_conditions import conditions_at_start, finish

from streamdp.consistency import SEED004_COMBOS, census_exact, census_residuals
from streamdp.papers import (
    census_approximation,
    dyadic_tree,
    restaurant_approximation,
    restaurant_release,
)

EPS = 1.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def restaurant_data(days: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, object]:
    tree = dyadic_tree(days, 2)
    q = rng.poisson(10.0, size=(days, SEED004_COMBOS.shape[0])).astype(np.float64)
    day_items = q @ SEED004_COMBOS  # (days, items)
    truth = (tree.aggregation_matrix() @ day_items).T  # (items, nodes)
    height = len(tree.level_bounds)
    scale = SEED004_COMBOS.shape[1] * height / EPS  # seed 004: Delta = c h
    noisy = truth + rng.laplace(0.0, scale, size=truth.shape)
    return truth, noisy, tree


def timed(solve: Callable[[], Any], repeats: int) -> tuple[Any, dict[str, Any]]:
    """The last of ``repeats`` results of ``solve()`` and the seconds each took (median,
    min, max, all)."""
    times = []
    result = None
    for _ in range(repeats):
        result = None  # the previous solve's output is freed before the next one runs
        start = time.perf_counter()
        result = solve()
        times.append(time.perf_counter() - start)
    return result, {
        "seconds": statistics.median(times),
        "seconds_min": min(times),
        "seconds_max": max(times),
        "seconds_each": times,
        "repeats": repeats,
    }


def run_restaurant(approx: bool, repeats: int) -> dict[str, object]:
    rng = np.random.default_rng(2021)
    days = 1_000_000
    truth, noisy, tree = restaurant_data(days, rng)
    base_rss = peak_rss_mb()
    if approx:
        result, timing = timed(
            lambda: restaurant_approximation(noisy, SEED004_COMBOS, tree=tree, max_iter=2000),  # type: ignore[arg-type]
            repeats,
        )
        values = result.values
        extra = {
            "iterations": result.iterations,
            "converged": result.converged,
            "final_deviation": result.deviations[-1],
            "residual": result.residual,
        }
    else:
        values, timing = timed(
            lambda: restaurant_release(noisy, SEED004_COMBOS, tree=tree),  # type: ignore[arg-type]
            repeats,
        )
        extra = {}
    leaves = tree.leaves  # type: ignore[attr-defined]
    return {
        "case": "restaurant-approx" if approx else "restaurant-exact",
        "days": days,
        "items": 5,
        "nodes": int(noisy.shape[1]),
        **timing,
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_solve_mb": base_rss,
        "rmse_days_noisy": float(np.sqrt(np.mean((noisy[:, leaves] - truth[:, leaves]) ** 2))),
        "rmse_days_consistent": float(
            np.sqrt(np.mean((values[:, leaves] - truth[:, leaves]) ** 2))
        ),
        **extra,
    }


def census_data(
    rng: np.random.Generator, regions: int = 449_814, sizes: tuple[int, ...] = (2, 7, 23)
):
    cells = np.empty((regions, *sizes))
    step = 50_000
    for lo in range(0, regions, step):
        hi = min(regions, lo + step)
        mx = rng.integers(1, 501, size=hi - lo)  # seed 000 SynData recipe: uniform 0..max
        cells[lo:hi] = np.floor(rng.random((hi - lo, *sizes)) * (mx.reshape(-1, 1, 1, 1) + 1))
    k = len(sizes)
    axes = tuple(range(1, k + 1))
    marg = [cells.sum(axis=tuple(a for a in axes if a != i + 1)) for i in range(k)]
    total = cells.sum(axis=axes)
    b = (k + 2) / EPS
    noisy_cells = cells + rng.laplace(0.0, b, size=cells.shape)
    noisy_marg = [m + rng.laplace(0.0, b, size=m.shape) for m in marg]
    noisy_total = total + rng.laplace(0.0, b, size=total.shape)
    return (total, marg, cells), (noisy_total, noisy_marg, noisy_cells)


def rmse(a, b) -> float:
    sq = (
        np.sum((a[0] - b[0]) ** 2)
        + sum(np.sum((x - y) ** 2) for x, y in zip(a[1], b[1], strict=True))
        + np.sum((a[2] - b[2]) ** 2)
    )
    count = a[0].size + sum(x.size for x in a[1]) + a[2].size
    return float(np.sqrt(sq / count))


def run_census(fgmc: bool, repeats: int) -> dict[str, object]:
    rng = np.random.default_rng(2024)
    truth, noisy = census_data(rng)
    base_rss = peak_rss_mb()
    extra: dict[str, object] = {}
    if fgmc:
        res, timing = timed(lambda: census_approximation(*noisy), repeats)
        out = (res.total, res.marginals, res.cells)
        extra = {
            "mean_iterations": float(res.iterations.mean()),
            "max_iterations": int(res.iterations.max()),
        }
    else:
        out, timing = timed(lambda: census_exact(*noisy), repeats)
    resid = float(np.max(np.abs(census_residuals(*out))))
    return {
        "case": "census-fgmc" if fgmc else "census-exact",
        "regions": int(noisy[0].shape[0]),
        "cells": 322,
        "values_per_region": 1 + 2 + 7 + 23 + 322,
        **timing,
        "peak_rss_mb": peak_rss_mb(),
        "rss_before_solve_mb": base_rss,
        "max_residual": resid,
        "rmse_noisy": rmse(noisy, truth),
        "rmse_consistent": rmse(out, truth),
        **extra,
    }


def main() -> int:
    runners: dict[str, Callable[[int], dict[str, object]]] = {
        "restaurant-exact": lambda repeats: run_restaurant(False, repeats),
        "restaurant-approx": lambda repeats: run_restaurant(True, repeats),
        "census-exact": lambda repeats: run_census(False, repeats),
        "census-fgmc": lambda repeats: run_census(True, repeats),
    }
    parser = argparse.ArgumentParser(
        description="One large consistency case (run each in its own process: its peak RSS).",
        epilog="No default case: census-fgmc alone peaks near 10 GB; run the cases one by one.",
    )
    parser.add_argument("case", choices=sorted(runners), help="which case to run (required)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed solves on the same data (default 3)"
    )
    add_write_flag(parser)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    conditions = conditions_at_start()
    result = runners[args.case](args.repeats)
    result["conditions"] = finish(conditions)
    target = output_dir(args.write) / f"consistency_large_{args.case}.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
