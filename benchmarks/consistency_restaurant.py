"""Seed 004 reproduced: the restaurant (5 items, 3 combos, eps = 1, binary trees).

Parts (tables printed; consistency_restaurant.json, .txt (the printed tables, with the run's
date, commit and load average) and .png written to benchmarks/out/, with --write to the
committed benchmarks/results/):
  1. Fig. 1-2: consistency deviation (eq. 14) and error (eq. 15) per iteration of Algorithm 1,
     T = 32..1024, 100 iterations, with the optimal error (exact path == dense) as a line.
  2. Fig. 3: run time of Algorithm 1 (tol 1e-6) vs the dense general solution vs our exact
     Kronecker path (and the sparse solver), T = 32..DENSE_MAX; the dense time at larger T is
     extrapolated by a T^3 fit (stated as such).
  3. Fig. 4: large T (up to 2^20 days): Algorithm 1 and the exact path.

    .venv/bin/python benchmarks/consistency_restaurant.py [--quick] [--write]

Timings: medians of repeats (every repeat's seconds in the JSON); the dense solve runs once
at T >= 256.
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

from streamdp.consistency import SEED004_COMBOS
from streamdp.papers import complete_tree, restaurant_approximation, restaurant_release

ITEMS = 5


def instance(T: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    h = int(np.log2(T))
    tree = complete_tree(2, h)
    days = rng.poisson(10.0, size=(T, 3)).astype(float) @ SEED004_COMBOS
    truth = (tree.aggregation_matrix() @ days).T
    scale = ITEMS * (h + 1) / 1.0  # Delta = c h, eps = 1
    return truth, truth + rng.laplace(0.0, scale, size=truth.shape)


def timed(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    """Median seconds of ``repeats`` calls; every call's seconds are kept in ``SPREADS``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    SPREADS.append(times)
    return statistics.median(times)


#: the seconds of every call of each ``timed`` measurement, in order (for the JSON's spreads)
SPREADS: list[list[float]] = []


def convergence(Ts: list[int], rng: np.random.Generator) -> dict[int, dict[str, list[float]]]:
    out: dict[int, dict[str, list[float]]] = {}
    for T in Ts:
        truth, noisy = instance(T, rng)
        leaves = complete_tree(2, int(np.log2(T))).leaves
        errs: list[float] = []
        x = noisy
        devs: list[float] = []
        for _ in range(100):
            res = restaurant_approximation(x, SEED004_COMBOS, tol=1e-300, max_iter=1)
            x = res.values
            devs.append(res.deviations[0])
            errs.append(float(np.sqrt(np.mean((x[:, leaves] - truth[:, leaves]) ** 2))))
        best = restaurant_release(noisy, SEED004_COMBOS)
        out[T] = {
            "deviation": devs,
            "error": errs,
            "optimal_error": [float(np.sqrt(np.mean((best[:, leaves] - truth[:, leaves]) ** 2)))],
            "noisy_error": [float(np.sqrt(np.mean((noisy[:, leaves] - truth[:, leaves]) ** 2)))],
        }
    return out


def measure(quick: bool) -> dict[str, object]:
    """Run every part, printing its tables; the JSON payload (convergence, times, large T)."""
    rng = np.random.default_rng(2021)
    Ts = [32, 64, 128, 256, 512, 1024]
    dense_max = 128 if quick else 512
    conv = convergence(Ts[:3] if quick else Ts, rng)

    print("Fig. 1-2: Algorithm 1, 100 iterations (error = RMSE of daily counts, eq. 15)")
    print(
        f"{'T':>6} {'dev@1':>10} {'dev@50':>10} {'dev@100':>10} "
        f"{'err@0':>8} {'err@100':>8} {'optimal':>8}"
    )
    for T, c in conv.items():
        print(
            f"{T:>6} {c['deviation'][0]:>10.3g} "
            f"{c['deviation'][49]:>10.3g} {c['deviation'][99]:>10.3g} "
            f"{c['noisy_error'][0]:>8.2f} {c['error'][99]:>8.2f} {c['optimal_error'][0]:>8.2f}"
        )

    rows = []
    for T in Ts:
        _, noisy = instance(T, rng)
        approx_res = restaurant_approximation(noisy, SEED004_COMBOS, tol=1e-6)
        first = len(SPREADS)
        t_approx = timed(
            lambda noisy=noisy: restaurant_approximation(noisy, SEED004_COMBOS, tol=1e-6), 3
        )
        t_exact = timed(lambda noisy=noisy: restaurant_release(noisy, SEED004_COMBOS), 7)
        t_sparse = timed(
            lambda noisy=noisy: restaurant_release(noisy, SEED004_COMBOS, method="sparse"), 3
        )
        t_dense = None
        if dense_max >= T:
            t_dense = timed(
                lambda noisy=noisy: restaurant_release(noisy, SEED004_COMBOS, method="dense"),
                1 if T >= 256 else 3,
            )
        exact = restaurant_release(noisy, SEED004_COMBOS)
        rows.append(
            {
                "T": T,
                "approx_s": t_approx,
                "approx_iterations": approx_res.iterations,
                "approx_max_err_vs_exact": float(np.max(np.abs(approx_res.values - exact))),
                "exact_s": t_exact,
                "sparse_s": t_sparse,
                "dense_s": t_dense,
                "seconds_each (approx, exact, sparse, dense)": SPREADS[first:],
            }
        )
    measured = [(r["T"], r["dense_s"]) for r in rows if r["dense_s"] is not None]
    big = [(T, s) for T, s in measured if T >= 128] or measured
    coef = float(np.median([s / T**3 for T, s in big]))
    for r in rows:
        r["dense_extrapolated_s"] = coef * r["T"] ** 3 if r["dense_s"] is None else None

    print("\nFig. 3: run time (s), medians; paper at T=1024: general 267 s, Algorithm 1 0.667 s")
    print(
        f"{'T':>6} {'dense':>10} {'approx':>9} {'iters':>6} {'exact':>9} {'sparse':>9} "
        f"{'dense/exact':>12} {'approx/exact':>13} {'dense/approx':>13}"
    )
    for r in rows:
        dense = r["dense_s"] if r["dense_s"] is not None else r["dense_extrapolated_s"]
        mark = "" if r["dense_s"] is not None else "*"
        print(
            f"{r['T']:>6} {dense:>9.3g}{mark:1} {r['approx_s']:>9.3g} {r['approx_iterations']:>6} "
            f"{r['exact_s']:>9.2g} {r['sparse_s']:>9.2g} {dense / r['exact_s']:>12.0f} "
            f"{r['approx_s'] / r['exact_s']:>13.0f} {dense / r['approx_s']:>13.1f}"
        )
    print("* extrapolated from the measured dense times by a T^3 fit")

    large = []
    for p in [10, 12, 14] if quick else [10, 12, 14, 16, 18, 20]:
        T = 2**p
        _truth, noisy = instance(T, rng)
        t_exact = timed(lambda noisy=noisy: restaurant_release(noisy, SEED004_COMBOS), 3)
        entry = {"T": T, "exact_s": t_exact}
        if p <= 14:
            start = time.perf_counter()
            res = restaurant_approximation(noisy, SEED004_COMBOS, tol=1e-6)
            entry.update(approx_s=time.perf_counter() - start, approx_iterations=res.iterations)
        large.append(entry)
    print("\nFig. 4: large T (approximation to 2^14; 10^6 days: consistency_large.py)")
    for e in large:
        a = f"{e['approx_s']:.3g} s ({e['approx_iterations']} it)" if "approx_s" in e else "-"
        print(f"T={e['T']:>8}  exact {e['exact_s']:.3g} s   approx {a}")

    return {"convergence": {str(k): v for k, v in conv.items()}, "time": rows, "large": large}


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
    write_json_and_tables(out, "consistency_restaurant", payload, conditions, printed.getvalue())
    conv = {int(k): v for k, v in payload["convergence"].items()}  # type: ignore[attr-defined]
    rows = payload["time"]

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for T, c in conv.items():
        axes[0].semilogy(range(1, 101), c["deviation"], label=f"T={T}")
        line = axes[1].plot(range(101), [c["noisy_error"][0], *c["error"]], label=f"T={T}")
        axes[1].axhline(c["optimal_error"][0], ls="--", color=line[0].get_color(), lw=0.8)
    axes[0].set(title="consistency deviation (eq. 14) [seed 004 Fig. 1]", xlabel="iteration")
    axes[1].set(title="RMSE of days; dashed = optimum [seed 004 Fig. 2]", xlabel="iteration")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    Tcol = [r["T"] for r in rows]
    axes[2].loglog(
        Tcol,
        [r["dense_s"] or r["dense_extrapolated_s"] for r in rows],
        "o-",
        label="dense general (ours; >512 extrapolated)",
    )
    axes[2].loglog(Tcol, [r["approx_s"] for r in rows], "s-", label="Algorithm 1 (ours)")
    axes[2].loglog(Tcol, [r["exact_s"] for r in rows], "^-", label="exact Kronecker (ours)")
    axes[2].loglog(Tcol, [r["sparse_s"] for r in rows], "v-", label="sparse KKT (ours)")
    axes[2].loglog([1024], [267.0], "kx", ms=10, label="paper: general 267 s")
    axes[2].loglog([1024], [0.667], "k+", ms=10, label="paper: Algorithm 1 0.667 s")
    axes[2].set(title="run time [seed 004 Fig. 3]", xlabel="T (days)", ylabel="seconds")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "consistency_restaurant.png", dpi=110)
    print(f"wrote {out / 'consistency_restaurant.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
