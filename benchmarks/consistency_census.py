"""Seed 000 reproduced: census-style attributes (total, marginals, cells), synthetic data.

  1. Census2010 shapes (sex x race 2x7, sex x age 2x23, race x age 7x23, all three 2x7x23),
     synthetic counts by seed 000's SynData recipe: FGMC approximation vs GMC approximation vs a
     recursive per-node tree method (PrivTrie-like, Python recursion) vs our exact ANOVA path.
     Timed on REGIONS regions and scaled linearly to 449,814 (the full-size exact and FGMC runs
     for 2x7x23 are measured directly by consistency_large.py).
  2. SynData: k = 2..8, n = 2^k..2^13: run time per region, iterations, RMSE without and with
     post-processing (eps = 1, Laplace((k+2)/eps)).

    .venv/bin/python benchmarks/consistency_census.py [--quick] [--write]

Prints the tables and writes consistency_census.json, .txt (the printed tables) and .png to
benchmarks/out/ (with --write: the committed benchmarks/results/), with the date, commit and
load average of the run. Timings: medians of 3 (GMC and the recursive method: one run).
"""

from __future__ import annotations

import argparse
import statistics
import time

import matplotlib
from results_dir import add_write_flag, output_dir, printed_copy, write_json_and_tables
from run_conditions import conditions_at_start, finish

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from streamdp.consistency import census_exact
from streamdp.papers import Tree, census_approximation, gmc_projection

FULL_REGIONS = 449_814


def synthetic(sizes: tuple[int, ...], regions: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    mx = rng.integers(1, 501, size=regions).reshape((-1,) + (1,) * len(sizes))
    cells = np.floor(rng.random((regions, *sizes)) * (mx + 1))
    k = len(sizes)
    axes = tuple(range(1, k + 1))
    marg = [cells.sum(axis=tuple(a for a in axes if a != i + 1)) for i in range(k)]
    truth = (cells.sum(axis=axes), marg, cells)
    b = (k + 2) / 1.0
    noisy = (
        truth[0] + rng.laplace(0, b, regions),
        [x + rng.laplace(0, b, x.shape) for x in marg],
        cells + rng.laplace(0, b, cells.shape),
    )
    return truth, noisy


def rmse(a, b) -> float:  # type: ignore[no-untyped-def]
    sq = float(np.sum((a[0] - b[0]) ** 2)) + float(np.sum((a[2] - b[2]) ** 2))
    sq += sum(float(np.sum((x - y) ** 2)) for x, y in zip(a[1], b[1], strict=True))
    count = a[0].size + a[2].size + sum(x.size for x in a[1])
    return float(np.sqrt(sq / count))


def three_level_tree(k1: int, k2: int) -> Tree:
    return Tree(
        np.concatenate([[-1], np.zeros(k1, dtype=np.int64), np.repeat(np.arange(1, k1 + 1), k2)])
    )


def gmc_approximation(t, s, m, tol=1e-6, max_iter=10_000):  # type: ignore[no-untyped-def]
    """The same sweeps as FGMC but each three-level tree solved by the generic GMC propagation."""
    s = [x.copy() for x in s]
    R = m.shape[0]
    trees = [three_level_tree(m.shape[i + 1], m.size // R // m.shape[i + 1]) for i in range(len(s))]
    count = 1 + sum(x.shape[1] for x in s) + m[0].size
    for sweep in range(1, max_iter + 1):
        before = np.concatenate([t[:, None], *s, m.reshape(R, -1)], axis=1)
        for i, tree in enumerate(trees):
            moved = np.moveaxis(m, i + 1, 1)
            shape = moved.shape
            flat = np.concatenate([t[:, None], s[i], moved.reshape(R, -1)], axis=1)
            out = gmc_projection(flat, tree)
            t, s[i] = out[:, 0], out[:, 1 : 1 + shape[1]]
            m = np.moveaxis(out[:, 1 + shape[1] :].reshape(shape), 1, i + 1)
        after = np.concatenate([t[:, None], *s, m.reshape(R, -1)], axis=1)
        if np.max(np.abs(after - before).sum(axis=1) / count) < tol:
            return (t, s, m), sweep
    return (t, s, m), max_iter


def recursive_region(t: float, s: list[list[float]], m: np.ndarray, tol: float = 1e-6) -> int:
    """PrivTrie-style: per region, per attribute, a recursive two-pass over a node-object tree."""

    def up(node):  # type: ignore[no-untyped-def]
        if not node["kids"]:
            node["z"], node["u"] = node["v"], 1.0
            return
        for c in node["kids"]:
            up(c)
        cz = sum(c["z"] for c in node["kids"])
        cu = sum(c["u"] for c in node["kids"])
        node["cz"], node["cu"] = cz, cu
        node["z"] = (node["v"] * cu + cz) / (cu + 1.0)
        node["u"] = cu / (cu + 1.0)

    def down(node, value):  # type: ignore[no-untyped-def]
        node["v"] = value
        for c in node["kids"]:
            down(c, c["z"] + c["u"] / node["cu"] * (value - node["cz"]))

    k = len(s)
    count = 1 + sum(len(x) for x in s) + m.size
    for sweep in range(1, 10_001):
        change = 0.0
        for i in range(k):
            moved = np.moveaxis(m, i, 0)
            leaves = [[{"v": float(v), "kids": []} for v in row.ravel()] for row in moved]
            mids = [{"v": s[i][j], "kids": leaves[j]} for j in range(len(s[i]))]
            root = {"v": t, "kids": mids}
            old = [t, *s[i], *moved.ravel()]
            up(root)
            down(root, root["z"])
            t = root["v"]
            s[i] = [mid["v"] for mid in mids]
            new_cells = np.array([[leaf["v"] for leaf in row] for row in leaves]).reshape(
                moved.shape
            )
            m = np.moveaxis(new_cells, 0, i)
            change += sum(
                abs(a - b) for a, b in zip(old, [t, *s[i], *new_cells.ravel()], strict=True)
            )
        if change / count < tol:
            return sweep
    return 10_000


def median_time(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def census_part(rng: np.random.Generator, regions: int, rec_regions: int) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for name, sizes in [
        ("Census_k2_n14", (2, 7)),
        ("Census_k2_n46", (2, 23)),
        ("Census_k2_n161", (7, 23)),
        ("Census_k3_n322", (2, 7, 23)),
    ]:
        truth, noisy = synthetic(sizes, regions, rng)
        t_exact = median_time(lambda noisy=noisy: census_exact(*noisy), 3)
        fg = census_approximation(*noisy)
        t_fgmc = median_time(lambda noisy=noisy: census_approximation(*noisy), 3)
        t_gmc = median_time(lambda noisy=noisy: gmc_approximation(*noisy), 1)
        _, gmc_it = gmc_approximation(*noisy)
        start = time.perf_counter()
        for r in range(rec_regions):
            recursive_region(float(noisy[0][r]), [list(x[r]) for x in noisy[1]], noisy[2][r].copy())
        t_rec = (time.perf_counter() - start) / rec_regions * regions
        exact = census_exact(*noisy)
        scale = FULL_REGIONS / regions
        rows.append(
            {
                "subset": name,
                "regions_timed": regions,
                "exact_s_full": t_exact * scale,
                "fgmc_s_full": t_fgmc * scale,
                "gmc_s_full": t_gmc * scale,
                "recursive_s_full": t_rec * scale,
                "fgmc_mean_iterations": float(fg.iterations.mean()),
                "gmc_iterations": gmc_it,
                "fgmc_max_err_vs_exact": max(float(np.max(np.abs(fg.cells - exact[2]))), 0.0),
                "rmse_no_pp": rmse(noisy, truth),
                "rmse_pp": rmse(exact, truth),
            }
        )
    return rows


def split_sizes(k: int, p: int) -> tuple[int, ...]:
    """n = 2^p split into k power-of-two attribute sizes as evenly as possible (each >= 2)."""
    exps = [p // k + (1 if i < p % k else 0) for i in range(k)]
    return tuple(2**e for e in exps)


def syn_part(rng: np.random.Generator, regions: int, ks: list[int]) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for k in ks:
        for p in range(k, 14):
            sizes = split_sizes(k, p)
            truth, noisy = synthetic(sizes, regions, rng)
            t_exact = median_time(lambda noisy=noisy: census_exact(*noisy), 3)
            fg = census_approximation(*noisy)
            t_fgmc = median_time(lambda noisy=noisy: census_approximation(*noisy), 3)
            start = time.perf_counter()
            _, gmc_it = gmc_approximation(*noisy)
            t_gmc = time.perf_counter() - start
            exact = census_exact(*noisy)
            rows.append(
                {
                    "k": k,
                    "n": 2**p,
                    "sizes": sizes,
                    "regions": regions,
                    "exact_ms_per_region": 1e3 * t_exact / regions,
                    "fgmc_ms_per_region": 1e3 * t_fgmc / regions,
                    "gmc_ms_per_region": 1e3 * t_gmc / regions,
                    "fgmc_mean_iterations": float(fg.iterations.mean()),
                    "gmc_iterations": gmc_it,
                    "rmse_no_pp": rmse(noisy, truth),
                    "rmse_pp": rmse(exact, truth),
                }
            )
    return rows


def measure(quick: bool) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    """Run both parts, printing their tables; the JSON payload (census shapes, SynData)."""
    rng = np.random.default_rng(2024)
    census = census_part(rng, 500 if quick else 4000, 2 if quick else 10)
    print(
        "Census2010 shapes, seconds scaled to 449,814 regions (paper: FGMC 16-19x faster than GMC)"
    )
    print(
        f"{'subset':>16} {'exact':>8} {'FGMC':>8} {'GMC':>8} {'recursive':>10} {'FGMC it':>8} "
        f"{'GMC/FGMC':>9} {'FGMC/exact':>11} {'RMSE noPP':>10} {'RMSE PP':>8}"
    )
    for r in census:
        print(
            f"{r['subset']:>16} {r['exact_s_full']:>8.2f} "
            f"{r['fgmc_s_full']:>8.1f} {r['gmc_s_full']:>8.1f} "
            f"{r['recursive_s_full']:>10.0f} {r['fgmc_mean_iterations']:>8.1f} "
            f"{r['gmc_s_full'] / r['fgmc_s_full']:>9.1f} "
            f"{r['fgmc_s_full'] / r['exact_s_full']:>11.1f} "
            f"{r['rmse_no_pp']:>10.3f} {r['rmse_pp']:>8.3f}"
        )
    syn = syn_part(rng, 20 if quick else 50, [2, 3] if quick else [2, 3, 4, 5, 6, 7, 8])
    print("\nSynData (ms per region; RMSE without / with post-processing)")
    print(
        f"{'k':>2} {'n':>6} {'exact':>8} {'FGMC':>8} {'GMC':>8} {'FGMC it':>8} {'GMC/FGMC':>9} "
        f"{'FGMC/exact':>11} {'noPP':>7} {'PP':>7}"
    )
    for r in syn:
        print(
            f"{r['k']:>2} {r['n']:>6} {r['exact_ms_per_region']:>8.3f} "
            f"{r['fgmc_ms_per_region']:>8.3f} "
            f"{r['gmc_ms_per_region']:>8.3f} {r['fgmc_mean_iterations']:>8.1f} "
            f"{r['gmc_ms_per_region'] / r['fgmc_ms_per_region']:>9.1f} "
            f"{r['fgmc_ms_per_region'] / r['exact_ms_per_region']:>11.1f} "
            f"{r['rmse_no_pp']:>7.3f} {r['rmse_pp']:>7.3f}"
        )
    return {"census": census, "syndata": syn}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer trials")
    add_write_flag(parser)
    args = parser.parse_args()
    out = output_dir(args.write)
    conditions = conditions_at_start()
    with printed_copy() as printed:
        payload = measure(args.quick)
    conditions = finish(conditions)
    write_json_and_tables(out, "consistency_census", payload, conditions, printed.getvalue())
    census, syn = payload["census"], payload["syndata"]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    names = [r["subset"].replace("Census_", "") for r in census]
    xs = np.arange(len(names))
    for off, key, label in [
        (-0.3, "exact_s_full", "exact (ours)"),
        (-0.1, "fgmc_s_full", "FGMC approx"),
        (0.1, "gmc_s_full", "GMC approx"),
        (0.3, "recursive_s_full", "recursive"),
    ]:
        axes[0].bar(xs + off, [r[key] for r in census], width=0.2, label=label)
    axes[0].set_yscale("log")
    axes[0].set_xticks(xs, names)
    axes[0].set(title="Census shapes, s for 449,814 regions [seed 000 Fig. 7a]")
    axes[0].legend(fontsize=7)
    for k in sorted({r["k"] for r in syn}):
        sub = [r for r in syn if r["k"] == k]
        axes[1].loglog(
            [r["n"] for r in sub], [r["fgmc_ms_per_region"] for r in sub], "o-", label=f"FGMC k={k}"
        )
        axes[1].loglog([r["n"] for r in sub], [r["exact_ms_per_region"] for r in sub], "k:", lw=0.8)
        axes[2].semilogx(
            [r["n"] for r in sub], [r["rmse_no_pp"] for r in sub], "x--", label=f"no PP k={k}"
        )
        axes[2].semilogx(
            [r["n"] for r in sub], [r["rmse_pp"] for r in sub], "o-", label=f"PP k={k}"
        )
    axes[1].set(title="SynData ms/region; dotted = exact [seed 000 Fig. 7b-h]", xlabel="n")
    axes[2].set(title="SynData RMSE, eps=1 [seed 000 Fig. 9]", xlabel="n")
    axes[1].legend(fontsize=6)
    axes[2].legend(fontsize=5, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "consistency_census.png", dpi=110)
    print(f"wrote {out / 'consistency_census.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
