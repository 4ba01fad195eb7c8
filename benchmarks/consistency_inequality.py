"""Inequality constraints (seed 004's open question): non-negative days by Dykstra.

The restaurant with sparse sales (many true zeros, where noise pushes consistent values below
zero). Compares the equality-only optimal release (unbiased) with the Dykstra projection that
also keeps every node >= 0 (so running totals never decrease): RMSE, mean error (bias) on days
whose true count is zero and on the others, and run time. Medians over TRIALS noise draws.

    .venv/bin/python benchmarks/consistency_inequality.py [--write]

Prints the table and writes consistency_inequality.json, .txt (the printed table, with the
run's date, commit and load average) and .png to benchmarks/out/ (with --write: the committed
benchmarks/results/).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib
from results_dir import add_write_flag, output_dir, printed_copy, write_json_and_tables
from run_conditions import conditions_at_start, finish

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from streamdp.consistency import SEED004_COMBOS
from streamdp.papers import complete_tree, nonnegative_release, restaurant_release


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_write_flag(parser)
    args = parser.parse_args()
    out = output_dir(args.write)
    conditions = conditions_at_start()
    rng = np.random.default_rng(77)
    T, trials = 64, 20
    tree = complete_tree(2, 6)
    leaves = tree.leaves
    rows = []
    for rate in [0.05, 0.3, 1.0, 5.0]:
        stats: dict[str, list[float]] = {
            k: []
            for k in [
                "rmse_eq",
                "rmse_dyk",
                "bias0_eq",
                "bias0_dyk",
                "biaspos_eq",
                "biaspos_dyk",
                "t_eq",
                "t_dyk",
                "it",
            ]
        }
        for _ in range(trials):
            days = rng.poisson(rate, size=(T, 3)).astype(float) @ SEED004_COMBOS
            truth = (tree.aggregation_matrix() @ days).T
            noisy = truth + rng.laplace(0, 5 * 7 / 1.0, size=truth.shape)
            start = time.perf_counter()
            eq = restaurant_release(noisy, SEED004_COMBOS)
            stats["t_eq"].append(time.perf_counter() - start)
            start = time.perf_counter()
            dyk = nonnegative_release(
                noisy, lambda v: restaurant_release(v, SEED004_COMBOS), tol=1e-7
            )
            stats["t_dyk"].append(time.perf_counter() - start)
            stats["it"].append(dyk.iterations)
            td = truth[:, leaves]
            zero = td == 0
            for name, est in [("eq", eq), ("dyk", dyk.values)]:
                e = est[:, leaves] - td
                stats[f"rmse_{name}"].append(float(np.sqrt(np.mean(e**2))))
                stats[f"bias0_{name}"].append(float(e[zero].mean()) if zero.any() else 0.0)
                stats[f"biaspos_{name}"].append(float(e[~zero].mean()) if (~zero).any() else 0.0)
        row = {"poisson_rate": rate, **{k: float(np.median(v)) for k, v in stats.items()}}
        rows.append(row)
    conditions = finish(conditions)
    with printed_copy() as printed:
        print_table(rows)
    write_json_and_tables(
        out, "consistency_inequality", {"rows": rows}, conditions, printed.getvalue()
    )
    plot(rows, out)
    return 0


def print_table(rows: list[dict[str, float]]) -> None:
    print("Restaurant T=64, eps=1, Delta=5*7; medians of 20 draws; errors on daily item counts")
    print(
        f"{'rate':>5} {'RMSE eq':>8} {'RMSE >=0':>9} {'bias@0 eq':>10} {'bias@0 >=0':>11} "
        f"{'bias>0 eq':>10} {'bias>0 >=0':>11} {'ms eq':>7} {'ms >=0':>8} {'sweeps':>7}"
    )
    for r in rows:
        print(
            f"{r['poisson_rate']:>5} {r['rmse_eq']:>8.2f} {r['rmse_dyk']:>9.2f} "
            f"{r['bias0_eq']:>10.2f} {r['bias0_dyk']:>11.2f} {r['biaspos_eq']:>10.2f} "
            f"{r['biaspos_dyk']:>11.2f} {1e3 * r['t_eq']:>7.2f} {1e3 * r['t_dyk']:>8.1f} "
            f"{r['it']:>7.0f}"
        )


def plot(rows: list[dict[str, float]], out: Path) -> None:
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    rates = [r["poisson_rate"] for r in rows]
    ax[0].semilogx(rates, [r["rmse_eq"] for r in rows], "o-", label="equalities only (unbiased)")
    ax[0].semilogx(rates, [r["rmse_dyk"] for r in rows], "s-", label="+ non-negative (Dykstra)")
    ax[0].set(title="RMSE of daily item counts", xlabel="combos per day (Poisson rate)")
    ax[1].semilogx(rates, [r["bias0_dyk"] for r in rows], "s-", label="Dykstra, true-zero days")
    ax[1].semilogx(rates, [r["biaspos_dyk"] for r in rows], "^-", label="Dykstra, other days")
    ax[1].semilogx(rates, [r["bias0_eq"] for r in rows], "o--", label="equalities, true-zero days")
    ax[1].set(title="mean error (bias)", xlabel="combos per day (Poisson rate)")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "consistency_inequality.png", dpi=110)
    print(f"wrote {out / 'consistency_inequality.png'}")


if __name__ == "__main__":
    raise SystemExit(main())
