"""Reproduce seed 001 §5 (FDA continual counting): analytic and empirical accuracy tables + plots.

Units: per-release MSE of the running total in 1/epsilon^2 with Delta = 1 (epsilon = 1),
continuous Laplace for the paper's tables; the empirical check runs the real ContinualCounter
(exact discrete Laplace, INSECURE seeded sampler for reproducibility) and compares with the exact
discrete variance.

    .venv/bin/python benchmarks/continual_accuracy.py [--trials 500] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from streamdp.continual import ContinualCounter, build_strategy
from streamdp.continual.fda import optimal_weights, path_objectives, solve
from streamdp.continual.variance import variance_profile
from streamdp.noise import InsecureSeededSampler

N = 4095


def mse(mechanism: str, horizon: int, objective: str = "total", noise: str = "laplace"):
    return variance_profile(build_strategy(mechanism, objective, horizon), 1.0, 1.0, noise).total


def boost_mean_prefix_mse(m: int) -> float:
    """Hay et al. 2010 (Boost): binary tree over 2^m leaves, m+1 levels each Lap((m+1)/eps),
    least-squares consistency; mean over t of Var(prefix t). Exact via the Haar eigenbasis of
    H^T H = sum_k I (x) J_{2^k}: Haar wavelet of support 2^j has eigenvalue 2^j - 1, the constant
    vector 2^(m+1) - 1."""
    n = 2**m
    sigma2 = 2.0 * (m + 1) ** 2
    mean_t2 = (n + 1) * (2 * n + 1) / 6.0
    acc = mean_t2 / n / (2 * n - 1)
    for j in range(1, m + 1):
        h = 2 ** (j - 1)
        s = h * (h + 1) * (2 * h + 1) / 6 + (h - 1) * h * (2 * h - 1) / 6  # sum of min(r,2^j-r)^2
        acc += (s / 2**j) / 2**j / (2**j - 1)
    return sigma2 * acc


def boost_dense(m: int) -> float:
    """Dense GLS check of boost_mean_prefix_mse for small m."""
    n = 2**m
    rows = []
    for k in range(m + 1):
        size = 2**k
        for start in range(0, n, size):
            r = np.zeros(n)
            r[start : start + size] = 1
            rows.append(r)
    H = np.array(rows)
    cov = 2.0 * (m + 1) ** 2 * np.linalg.inv(H.T @ H)
    P = np.tril(np.ones((n, n)))
    return float(np.mean(np.einsum("ij,jk,ik->i", P, cov, P)))


def empirical(mechanism: str, trials: int, seed: int) -> tuple[float, float, float, np.ndarray]:
    """Mean over t of the empirical MSE over `trials` independent counters, with a 95% CI, and
    the analytic (discrete Laplace) mean it should match."""
    strategy = build_strategy(mechanism, "total", N)
    counter = ContinualCounter(strategy, 1.0, 1.0, trials, InsecureSeededSampler(seed))
    sq = np.zeros((N, trials))
    for t in range(N):
        sq[t] = (
            counter.close_period(np.zeros(trials, dtype=np.int64)).noisy_total.astype(float) ** 2
        )
    per_trial = sq.mean(axis=0)  # each trial's MSE averaged over t (independent across trials)
    mean = float(per_trial.mean())
    half = 1.96 * float(per_trial.std(ddof=1)) / math.sqrt(trials)
    return mean, half, float(mse(mechanism, N, noise="discrete-laplace").mean()), sq.mean(axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text)
        lines.append(text)

    fda, binary, naive = mse("fda", N), mse("binary", N), mse("naive", N)
    say(f"## Analytic per-release MSE at N = {N} (units 1/eps^2, Delta = 1, continuous Laplace)")
    say("| mechanism | mean MSE | max MSE | DESIGN §6 / paper |")
    say("|---|---:|---:|---|")
    say(f"| FDA (total) | {fda.mean():.1f} | {fda.max():.1f} | 2-4x below binary |")
    mm = mse("fda", N, "minimax")
    say(f"| FDA (minimax) | {mm.mean():.1f} | {mm.max():.1f} | (new) |")
    say(f"| binary mechanism | {binary.mean():.1f} | {binary.max():.1f} | 1728 |")
    say(f"| naive | {naive.mean():.1f} | {naive.max():.1f} | - |")
    say(f"| static Boost (offline, N=4096) | {boost_mean_prefix_mse(12):.1f} | - | 452 |")
    worse = np.nonzero(naive <= fda)[0]
    t_star = int(worse[-1]) + 2 if worse.size else 1
    say()
    say(f"Naive is worse than FDA for every t >= {t_star} (naive MSE = 2t grows linearly).")
    ratio = binary / fda
    share = float(np.mean((ratio >= 2) & (ratio <= 4)))
    say(
        f"Binary/FDA MSE ratio per t: median {np.median(ratio):.2f}, share of t in [2, 4]: "
        f"{100 * share:.1f}%, max {ratio.max():.2f} (at t = {int(ratio.argmax()) + 1}), "
        f"min {ratio.min():.2f}; paper: mostly 2-4x, up to ~6x."
    )

    say(
        "Static Boost here: Hay et al. tree over 2^m leaves, m+1 levels, uniform budget, "
        "least-squares consistency (exact, Haar eigenbasis; checked against a dense GLS solve). "
        "DESIGN's 452 likely used a slightly different tree; the ratio below still tends to the "
        "paper's 0.625."
    )
    say()
    say("## FDA vs static Boost, N = 2^m (paper Fig. 8: Boost/FDA about 0.625)")
    for m in (2, 3, 5):
        assert abs(boost_dense(m) - boost_mean_prefix_mse(m)) < 1e-9 * boost_dense(m)
    say("| m | FDA mean MSE (N = 2^m - 1) | Boost mean MSE (N = 2^m) | Boost/FDA |")
    say("|---:|---:|---:|---:|")
    ratios = []
    for m in range(1, 26):
        f = 2.0 * solve(2**m - 1, "total")[0] / (2**m - 1)
        b = boost_mean_prefix_mse(m)
        ratios.append(b / f)
        if m in (1, 2, 4, 8, 12, 16, 20, 25):
            say(f"| {m} | {f:.1f} | {b:.1f} | {b / f:.3f} |")
    say(f"Boost/FDA over m = 10..25: {min(ratios[9:]):.3f} .. {max(ratios[9:]):.3f}")

    say()
    say(f"## Empirical vs analytic at N = {N}: {args.trials} trials (exact discrete Laplace)")
    say("| mechanism | analytic mean MSE | empirical mean MSE | 95% CI half-width | inside |")
    say("|---|---:|---:|---:|:---:|")
    curves = {}
    times = {}
    for i, mech in enumerate(("fda", "binary", "naive")):
        t0 = time.perf_counter()
        emp, half, ana, curve = empirical(mech, args.trials, 100 + i)
        times[mech] = time.perf_counter() - t0
        curves[mech] = curve
        say(
            f"| {mech} | {ana:.1f} | {emp:.1f} | {half:.1f} | "
            f"{'yes' if abs(emp - ana) <= half else 'NO'} |"
        )
    say(
        "Counter speed (shared 2-core machine): "
        + ", ".join(f"{k} {N / v:.0f} closes/s at width {args.trials}" for k, v in times.items())
    )

    say()
    say("## Any-N optimum vs padding to 2^m - 1 (mean MSE over t = 1..N)")
    say("| N | any-N | padded (2^m - 1) | padded/any-N |")
    say("|---:|---:|---:|---:|")
    for n in (100, 365, 1000, 2048, 4096, 5000, 100_000):
        any_n = 2.0 * solve(n, "total")[0] / n
        padded = 2 ** n.bit_length() - 1 if (n + 1) & n else n
        pad = 2.0 * float(path_objectives(optimal_weights(padded))[:n].mean())
        say(f"| {n} | {any_n:.1f} | {pad:.1f} | {pad / any_n:.3f} |")

    say()
    say("## Minimax vs total objective (FDA)")
    say("| N | total: mean | total: max | minimax: mean | minimax: max |")
    say("|---:|---:|---:|---:|---:|")
    for n in (120, 365, 4095, 100_000):
        a, b = mse("fda", n), mse("fda", n, "minimax")
        say(f"| {n} | {a.mean():.1f} | {a.max():.1f} | {b.mean():.1f} | {b.max():.1f} |")

    (args.out / "continual_accuracy.md").write_text(
        "# Continual counting accuracy (seed 001 §5)\n\nCommand: "
        "`.venv/bin/python benchmarks/continual_accuracy.py --trials "
        f"{args.trials}`\n\n" + "\n".join(lines) + "\n"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(1, N + 1)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    ax.plot(t, naive, label="naive", lw=0.8)
    ax.plot(t, binary, label="binary mechanism", lw=0.6)
    ax.plot(t, fda, label="FDA (total)", lw=0.6)
    ax.plot(t, curves["fda"], ".", ms=0.8, alpha=0.4, label=f"FDA empirical ({args.trials} trials)")
    ax.set_yscale("log")
    ax.set_xlabel("release t")
    ax.set_ylabel("MSE of running total (1/eps^2)")
    ax.set_title(f"Per-release MSE, N = {N} (paper Fig. 5-6)")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(t, ratio, lw=0.5)
    ax.axhspan(2, 4, color="green", alpha=0.1, label="2-4x (paper)")
    ax.set_xlabel("release t")
    ax.set_ylabel("binary MSE / FDA MSE")
    ax.set_title("FDA vs binary mechanism")
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(range(1, 26), ratios, "o-")
    ax.axhline(0.625, color="grey", ls="--", label="paper: ~0.625")
    ax.set_xlabel("m (N = 2^m)")
    ax.set_ylabel("Boost MSE / FDA MSE")
    ax.set_title("FDA vs static Boost (paper Fig. 8)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "continual_accuracy.png", dpi=110)
    print(f"wrote {args.out / 'continual_accuracy.md'} and continual_accuracy.png")


if __name__ == "__main__":
    main()
