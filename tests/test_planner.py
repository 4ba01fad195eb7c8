"""streamdp plan: JSON contract for every mechanism/objective, exact 95% bounds, bad input."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from streamdp.cli import main
from streamdp.continual import build_strategy
from streamdp.continual.variance import variance_profile
from streamdp.error_band import half_width95
from streamdp.planner.accuracy import plan
from streamdp.planner.error_bound import error_bound

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
    # issue 26: the plan shows the band the feed draws beside its exact bound, never only one
    for release in data["releases"]:
        assert release["published_half_width95"] == half_width95(release["total_std"])
        assert release["published_half_width95"] >= release["error95"] - 1.0


def test_table_output_shows_error_bounds(capsys) -> None:
    assert main(["plan", "--horizon", "365", "--epsilon", "1", "--sensitivity", "5"]) == 0
    out = capsys.readouterr().out
    assert "95% error bound" in out
    rows = [
        line.split() for line in out.splitlines() if re.fullmatch(r"\s+\d+(\s+[\d.]+){3}", line)
    ]
    assert [int(row[0]) for row in rows] == [1, 91, 182, 273, 365]
    for _, std, bound, band in rows:
        # a 95% bound of the total's noise: beyond the normal's 1.64 std (a symmetric
        # heavier-tailed sum), within the published band (2.12 std + 1, wider on purpose)
        assert 1.64 * float(std) < float(bound) <= float(band)
        assert float(band) == pytest.approx(
            2.12 * float(std) + 1, abs=0.12
        )  # std shown to 4 digits


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--horizon", "0", "--sensitivity", "1", "--epsilon", "1"],
        ["plan", "--horizon", "10", "--sensitivity", "1", "--epsilon", "-1"],
        ["plan", "--horizon", "10", "--epsilon", "1", "--sensitivity", "0"],
        ["plan", "--horizon", "10", "--sensitivity", "1", "--epsilon", "nan"],
    ],
)
def test_bad_values_exit_2_with_a_message(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_bad_choice_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(
            [
                "plan",
                "--mechanism",
                "gauss",
                "--horizon",
                "10",
                "--sensitivity",
                "1",
                "--epsilon",
                "1",
            ]
        )
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
    argv = [
        "plan",
        "--mechanism",
        "kary_gls",
        "--horizon",
        "4095",
        "--sensitivity",
        "1",
        "--epsilon",
        "1",
    ]
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
    argv = [
        "plan",
        "--compare",
        "--horizon",
        "365",
        "--sensitivity",
        "1",
        "--epsilon",
        "1",
        "--noise",
        "laplace",
    ]
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
    argv = [
        "plan",
        "--mechanism",
        "fda",
        "--branching",
        "4",
        "--horizon",
        "10",
        "--sensitivity",
        "1",
        "--epsilon",
        "1",
    ]
    assert main(argv) == 2
    assert "branching" in capsys.readouterr().err


# --- a spec's streams, and the epsilon for a target error ------------------------------------
DEMO = "streamdp/examples/demo.toml"


def test_config_plans_every_stream_of_a_spec_with_its_own_values(capsys) -> None:
    from streamdp.engine import load_spec

    spec = load_spec(DEMO)
    assert main(["plan", "--config", DEMO, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["stream"] for r in rows] == list(spec.streams)
    for row in rows:
        stream = spec.streams[row["stream"]]
        expected = plan(
            stream.mechanism,
            stream.objective,
            stream.horizon,
            float(stream.epsilon),
            float(stream.sensitivity),
            branching=stream.branching,
        )
        assert row["mechanism"] == stream.mechanism
        assert row["horizon"] == stream.horizon
        assert row["epsilon"] == float(stream.epsilon)
        assert row["sensitivity"] == float(stream.sensitivity)
        assert row["mean_variance"] == pytest.approx(expected.mean_variance, rel=1e-12)
        assert row["max_std"] == pytest.approx(math.sqrt(expected.max_variance), rel=1e-12)
        assert row["period_count_std"] == pytest.approx(
            math.sqrt(expected.mean_count_variance), rel=1e-12
        )
    assert main(["plan", "--config", DEMO]) == 0
    table = capsys.readouterr().out
    for name in spec.streams:
        assert name in table
    assert "count std" in table


def test_config_compare_lists_every_mechanism_per_stream(capsys) -> None:
    assert main(["plan", "--config", DEMO, "--compare", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"restaurant-items", "admissions-census", "hiv-admissions"}
    assert all(len(rows) == 8 for rows in data.values())
    assert {r["horizon"] for r in data["hiv-admissions"]} == {52}


@pytest.mark.parametrize(
    ("mechanism", "objective"),
    [("fda", "total"), ("fda", "minimax"), ("binary", "total"), ("naive", "total"),
     ("kary_gls", "count")],
)  # fmt: skip
def test_target_std_gives_the_smallest_epsilon_that_meets_it(
    mechanism: str, objective: str
) -> None:
    from decimal import Decimal

    from streamdp.planner.target import epsilon_for_std, planned_std

    target = 10.0
    epsilon, result = epsilon_for_std(target, mechanism, objective, 365, 5.0)
    assert len(epsilon.normalize().as_tuple().digits) <= 3
    assert result.epsilon == float(epsilon)
    assert planned_std(result) <= target
    # one unit less in the last of the 3 digits misses the target: the answer is the smallest
    step = Decimal(1).scaleb(epsilon.adjusted() - 2)
    below = plan(mechanism, objective, 365, float(epsilon - step), 5.0)
    assert planned_std(below) > target
    # the measure follows the objective: the worst running total for minimax
    if objective == "minimax":
        assert planned_std(result) == math.sqrt(result.max_variance)


def test_target_std_for_continuous_laplace_is_the_inverse_square_law() -> None:
    """Variance is V(1)/epsilon^2 exactly for Laplace noise: epsilon = std(1)/target, rounded up."""
    from decimal import ROUND_CEILING, Decimal

    from streamdp.planner.target import epsilon_for_std

    one = plan("fda", "total", 1000, 1.0, 3.0, "laplace")
    target = 100.0
    exact = Decimal(repr(math.sqrt(one.mean_variance) / target))
    expected = exact.quantize(Decimal("0.001"), rounding=ROUND_CEILING)  # 3 digits: 0.xyz
    assert Decimal("0.1") <= exact < 1
    epsilon, _ = epsilon_for_std(target, "fda", "total", 1000, 3.0, "laplace")
    assert epsilon == expected


def test_target_std_on_the_command_line(capsys) -> None:
    assert main(["plan", "--horizon", "365", "--sensitivity", "5", "--target-std", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("epsilon per epoch needed: 8.73 ")
    assert "95% error bound" in out
    argv = ["plan", "--config", DEMO, "--target-std", "20", "--format", "json"]
    assert main(argv) == 0
    for row in json.loads(capsys.readouterr().out):
        assert row["planned_std"] <= 20
        assert row["epsilon"] == float(row["epsilon_for_target"])


def test_every_json_field_of_a_plan_is_documented() -> None:
    """docs/operating.md lists what ``plan --format json`` prints; a field added to
    :meth:`Plan.as_dict` (or a release's) without a line there fails here."""
    from pathlib import Path

    from streamdp.planner.zcdp import plan_zcdp

    text = (Path(__file__).resolve().parents[1] / "docs" / "operating.md").read_text("utf-8")
    section = text.split("### What `streamdp plan --format json` prints", 1)[1].split("\n## ", 1)[0]
    for result in (plan("kary_gls", "total", 64, 1.0, 1.0), plan_zcdp("blt", "total", 64, 0.5, 1)):
        data = result.as_dict()
        for key in [*data, *data["releases"][0], *data["privacy"]]:
            assert f"`{key}`" in section, key
