"""streamdp plan: JSON contract for every mechanism/objective, exact 95% bounds, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from streamdp.cli import main
from streamdp.continual import build_strategy
from streamdp.continual.variance import variance_profile
from streamdp.planner import error_bound, plan

KEYS = {
    "mechanism",
    "objective",
    "horizon",
    "epsilon",
    "sensitivity",
    "noise",
    "mean_variance",
    "max_variance",
}


@pytest.mark.parametrize(
    ("mechanism", "objective"),
    [("fda", "total"), ("fda", "minimax"), ("binary", "total"), ("naive", "total")],
)  # binary and naive have no objective: anything but the default is refused (test_cli_errors)
@pytest.mark.parametrize("noise", ["laplace", "discrete-laplace"])
def test_json_output(mechanism: str, objective: str, noise: str, capsys) -> None:
    code = main(
        [
            "plan",
            "--mechanism",
            mechanism,
            "--objective",
            objective,
            "--horizon",
            "100",
            "--epsilon",
            "0.5",
            "--sensitivity",
            "5",
            "--noise",
            noise,
            "--format",
            "json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data.keys() >= KEYS
    assert (data["mechanism"], data["objective"], data["noise"]) == (mechanism, objective, noise)
    assert (data["horizon"], data["epsilon"], data["sensitivity"]) == (100, 0.5, 5.0)
    prof = variance_profile(build_strategy(mechanism, objective, 100), 0.5, 5.0, noise)
    assert data["mean_variance"] == pytest.approx(float(prof.total.mean()), rel=1e-12)
    assert data["max_variance"] == pytest.approx(float(prof.total.max()), rel=1e-12)


def test_table_output_shows_error_bounds(capsys) -> None:
    assert main(["plan", "--horizon", "365", "--epsilon", "1", "--sensitivity", "5"]) == 0
    out = capsys.readouterr().out
    assert "95% error bound" in out
    assert "365" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--horizon", "0", "--epsilon", "1"],
        ["plan", "--horizon", "10", "--epsilon", "-1"],
        ["plan", "--horizon", "10", "--epsilon", "1", "--sensitivity", "0"],
        ["plan", "--horizon", "10", "--epsilon", "nan"],
    ],
)
def test_bad_values_exit_2_with_a_message(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_bad_choice_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["plan", "--mechanism", "gauss", "--horizon", "10", "--epsilon", "1"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("scale", [0.8, 3.0, 12.0])
def test_single_node_discrete_bound_is_exact(scale: float) -> None:
    # P(|X| <= k) = 1 - 2 q^(k+1) / (1 + q) for the discrete Laplace
    q = math.exp(-1 / scale)
    k = next(k for k in range(10_000) if 1 - 2 * q ** (k + 1) / (1 + q) >= 0.95)
    assert error_bound(np.array([scale]), "discrete-laplace") == k


def test_two_node_discrete_bound_against_direct_convolution() -> None:
    s1, s2 = 1.5, 4.0
    K = 400
    k = np.arange(-K, K + 1)

    def pmf(s: float) -> np.ndarray:
        q = math.exp(-1 / s)
        return (1 - q) / (1 + q) * q ** np.abs(k)

    dist = np.convolve(pmf(s1), pmf(s2))
    centre = dist.size // 2
    cum = [dist[centre - j : centre + j + 1].sum() for j in range(200)]
    want = next(j for j, c in enumerate(cum) if c >= 0.95)
    assert error_bound(np.array([s1, s2]), "discrete-laplace") == want


def test_continuous_single_node_bound() -> None:
    b = 10.0  # P(|X| <= q) = 1 - exp(-q/b) -> q = b ln 20
    got = error_bound(np.array([b]), "laplace")
    assert abs(got - b * math.log(20)) <= 2 * math.sqrt(2) * b / 400


def test_plan_reports_release_errors() -> None:
    p = plan("fda", "total", 100, 1.0, 1.0)
    assert [r.t for r in p.releases] == [1, 25, 50, 75, 100]
    assert all(r.error95 > r.total_std for r in p.releases)


def test_kary_gls_plan_meets_the_issue_target_at_4095(capsys) -> None:
    """Issue 13's acceptance: N = 4095, epsilon = Delta = 1, Laplace: mean <= 195, max <= 320."""
    argv = ["plan", "--mechanism", "kary_gls", "--horizon", "4095", "--epsilon", "1"]
    assert main([*argv, "--noise", "laplace", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mean_variance"] <= 195.0
    assert data["max_variance"] <= 320.0
    assert data["branching"] >= 2
    assert sum(data["level_budgets"]) <= 1.0
    assert data["mean_count_variance"] < data["mean_variance"]
    # the same with the discrete Laplace the counter samples: its exact variance is smaller
    assert main([*argv, "--format", "json"]) == 0
    discrete = json.loads(capsys.readouterr().out)
    assert discrete["mean_variance"] < data["mean_variance"]


@pytest.mark.parametrize("mechanism", ["kary_digits", "kary_gls"])
def test_kary_plan_with_fixed_branching(mechanism: str) -> None:
    result = plan(mechanism, "minimax", 200, 0.5, 2.0, "laplace", branching=4)
    assert result.branching == 4
    assert result.max_variance >= result.mean_variance > 0
    assert [r.t for r in result.releases] == [1, 50, 100, 150, 200]
    # the 95% bound of a sum of Laplace noises lies between 1.96 and 2.12 standard deviations
    for r in result.releases:
        assert 1.9 * r.total_std <= r.error95 <= 2.2 * r.total_std


def test_compare_lists_every_mechanism(capsys) -> None:
    argv = ["plan", "--compare", "--horizon", "365", "--epsilon", "1", "--noise", "laplace"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in ("naive", "binary", "fda", "kary_digits", "kary_gls"):
        assert name in out
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {(r["mechanism"], r["objective"]): r for r in rows}
    gls = by_name[("kary_gls", "total")]["mean_variance"]
    assert gls < by_name[("fda", "total")]["mean_variance"]
    assert gls < by_name[("binary", "total")]["mean_variance"]


def test_branching_for_a_fenwick_mechanism_is_an_error(capsys) -> None:
    argv = ["plan", "--mechanism", "fda", "--branching", "4", "--horizon", "10", "--epsilon", "1"]
    assert main(argv) == 2
    assert "branching" in capsys.readouterr().err
