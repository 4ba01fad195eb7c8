"""The planner's cost of a privacy unit's bounds (issue 28): every row is the planner's own
computation at M times one event's sensitivity (L1 for pure DP, L2 under zCDP), the chosen
bounds are the stream as configured, and the table grows with M. ``plan`` takes the bounds as
flags too (``--max-events-per-period A --max-periods-per-epoch B``), with a spec's checks."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from streamdp.cli import main
from streamdp.engine.privacy_unit import unit_multiplier
from streamdp.engine.spec_loading import parse_spec
from streamdp.planner import spec_plan
from streamdp.planner.accuracy import Plan, plan
from streamdp.planner.target import epsilon_for_std
from streamdp.planner.unit_cost import alternative_bounds, render_unit_costs, unit_costs
from streamdp.planner.zcdp import plan_zcdp

EXAMPLE = Path(__file__).resolve().parents[1] / "streamdp" / "examples" / "hospital_patients.toml"
UNIT = ("--max-events-per-period", "2", "--max-periods-per-epoch", "6")  # M = 12
PURE = ("plan", "--horizon", "12", "--epsilon", "0.5", "--sensitivity", "3")
ZCDP = ("plan", "--horizon", "12", "--rho", "0.25", "--sensitivity", "2")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    return capsys.readouterr().err


# --- plan --config: a spec's privacy_unit -----------------------------------------------------


def test_each_row_is_the_planner_at_m_times_one_events_sensitivity(
    capsys: pytest.CaptureFixture[str],
) -> None:
    streams = {entry["stream"]: entry for entry in _json(capsys, "plan", "--config", str(EXAMPLE))}
    hiv = streams["hiv-admissions"]
    assert hiv["sensitivity"] == 12  # 2 a month x 6 months x Delta = 1
    assert hiv["privacy_unit"] == {
        "field": "patient_id",
        "max_events_per_period": 2,
        "max_periods_per_epoch": 6,
        "multiplier": 12,
        "event_sensitivity": 1.0,
    }
    rows = hiv["unit_costs"]
    for row in rows:
        direct = plan("fda", "total", 12, 0.5, float(row["multiplier"]))
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
        assert row["max_std"] == pytest.approx(math.sqrt(direct.max_variance), rel=1e-12)
        assert row["error95_at_horizon"] == direct.releases[-1].error95
    chosen = [r for r in rows if r["chosen"]]
    assert [(r["max_events_per_period"], r["max_periods_per_epoch"]) for r in chosen] == [(2, 6)]
    assert chosen[0]["mean_std"] == pytest.approx(math.sqrt(hiv["mean_variance"]), rel=1e-12)
    multipliers = [r["multiplier"] for r in rows]
    stds = [r["mean_std"] for r in rows]
    assert multipliers == sorted(multipliers)
    assert stds == sorted(stds)
    assert stds[-1] > 40 * stds[0]  # M = 48 against one event: the bounds cost real accuracy


def _zcdp_example(tmp_path: Path) -> tuple[Path, str]:
    text = EXAMPLE.read_text().replace("epsilon_cap = 1.0", "rho_cap = 1.0")
    text = text.replace("epsilon = 0.5", 'privacy = { definition = "zcdp", rho = 0.25 }')
    text = text.replace("horizon = 12\n", 'horizon = 12\nmechanism = "binary"\n')
    text = text.replace("horizon = 365\n", 'horizon = 365\nmechanism = "binary"\n')
    config = tmp_path / "zcdp.toml"
    config.write_text(text)
    return config, text


def test_a_zcdp_stream_is_planned_at_m_times_its_l2_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, text = _zcdp_example(tmp_path)
    hiv = parse_spec(text).streams["hiv-admissions"]
    assert hiv.l2_squared == 144  # (12 x 1)^2
    rows = {e["stream"]: e for e in _json(capsys, "plan", "--config", str(config))}
    assert rows["hiv-admissions"]["sensitivity"] == 12.0
    for row in rows["hiv-admissions"]["unit_costs"]:
        direct = plan_zcdp("binary", "total", 12, Fraction(1, 4), float(row["multiplier"]))
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
    assert replace(hiv, privacy_unit=None).unit_multiplier == 1
    assert main(["plan", "--config", str(config)]) == 0
    assert "L2 sensitivity M x Delta_2 = 12 x 1 = 12 (L2^2 = M^2 x 1 = 144)" in (
        capsys.readouterr().out
    )


def test_config_compare_of_a_zcdp_unit_stream_puts_both_definitions_at_the_unit_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = _zcdp_example(tmp_path)
    seen: dict[int, tuple[float, float, int, int]] = {}

    def record(
        horizon: int,
        epsilon: float,
        l1: float,
        l2: float,
        delta: object,
        *,
        unit_multiplier: int,
        event_l2_squared: int,
        touched: int,
    ) -> list[Plan]:
        del touched
        # the zCDP rows' L2 bound: M times the event's, its square M^2 times an exact integer
        seen[horizon] = (l1, l2 * unit_multiplier, unit_multiplier, event_l2_squared)
        return [plan("binary", "total", horizon, epsilon, l1, points=[horizon])]

    monkeypatch.setattr(spec_plan, "compare_definitions", record)
    assert set(_json(capsys, "plan", "--config", str(config), "--compare")) == {
        "admissions-census",
        "hiv-admissions",
    }
    assert seen[12] == (12.0, 12.0, 12, 1)  # hiv: L1 (pure rows) and L2 (zCDP), 12 x 1 both
    census_l1, census_l2, multiplier, squared = seen[365]  # 12 x 5 and 12 x sqrt(5)
    assert (census_l1, multiplier, squared) == (60.0, 12, 5)
    assert census_l2 == pytest.approx(12 * math.sqrt(5), rel=1e-15)


def test_the_table_names_the_unit_and_marks_the_chosen_bounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--config", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "stream hiv-admissions: protects one patient_id per epoch, not one event" in out
    assert "at most 2 records in each of at most 6 periods" in out
    assert "M = 2 x 6 = 12 records per unit per epoch" in out
    assert "noise calibrated on sensitivity M x Delta = 12 x 1 = 12" in out
    assert "noise calibrated on sensitivity M x Delta = 12 x 5 = 60" in out  # the census
    assert "cost of the privacy unit's bounds (patient_id)" in out
    assert out.count("<- chosen") == 2


def test_alternative_bounds_stay_within_the_horizon_in_increasing_multiplier() -> None:
    pairs = alternative_bounds(2, 6, 8)
    assert (2, 6) in pairs
    assert all(1 <= b <= 8 for _, b in pairs)
    assert (4, 8) in pairs  # 2b capped at the horizon
    multipliers = [unit_multiplier(a, b) for a, b in pairs]
    assert multipliers == sorted(multipliers)
    assert alternative_bounds(1, 1, 1) == [(1, 1), (2, 1)]  # b/2 floored at 1, 2b capped
    # one period per epoch costs what two do: one record under a unit's identifier can move
    # its records to another period (tests/test_privacy_unit_forgery.py)
    assert [unit_multiplier(a, b) for a, b in alternative_bounds(1, 1, 1)] == [2, 4]


def test_the_cost_table_starts_at_one_event_and_says_so() -> None:
    rows = unit_costs(lambda m: plan("fda", "total", 8, 1.0, float(m)), 1, 1, 8)
    assert [(r.per_period, r.periods, r.multiplier, r.chosen) for r in rows[:2]] == [
        (1, 1, 1, False),
        (1, 1, 2, True),
    ]
    table = render_unit_costs(rows)
    assert table.splitlines()[2].lstrip().startswith("one event")


def test_the_cost_table_stays_in_columns_with_large_bounds_and_e_notation() -> None:
    # M up to 1000 x 4095 and sensitivities like 1.6e+08 are wider than the old fixed
    # columns: every row's columns must still end where the header's do
    rows = unit_costs(lambda m: plan("fda", "total", 4095, 0.01, 40.0 * m), 500, 3000, 4095)
    lines = render_unit_costs(rows).splitlines()
    header, body = lines[1], [x for x in lines[2:] if x[:1] == " " or x[:1].isdigit()]
    assert any("e+" in x for x in body)
    assert any(str(r.multiplier) in x for r in rows for x in body if r.multiplier >= 10**6)

    # right-aligned columns: each ends where its header ends, with a space (or the line's
    # end) after it
    ends = [m.end() - 1 for m in re.finditer(r"\S(?=  |$)", header)]
    assert len(ends) == 8
    for line in body:
        cells = line.removesuffix("  <- chosen")
        assert len(cells) == len(header), line
        filled = ends if "one event" not in cells else ends[:1] + ends[2:]
        assert all(cells[e] != " " and cells[e + 1 : e + 2] in (" ", "") for e in filled), line


# --- plan --max-events-per-period A --max-periods-per-epoch B ---------------------------------


@pytest.mark.parametrize(
    ("mechanism", "noise"),
    [("fda", "discrete-laplace"), ("fda", "laplace"), ("binary", "discrete-laplace"),
     ("kary_gls", "discrete-laplace")],
)  # fmt: skip
def test_the_unit_plan_is_the_event_plan_at_m_times_delta(
    mechanism: str, noise: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = (*PURE, "--mechanism", mechanism, "--noise", noise, *UNIT)
    data = _json(capsys, *argv)
    event = plan(mechanism, "total", 12, 0.5, 12 * 3.0, noise)
    assert data["sensitivity"] == 36.0
    assert data["privacy_unit"]["multiplier"] == 12
    assert data["privacy_unit"]["event_sensitivity"] == 3.0
    assert data["mean_variance"] == pytest.approx(event.mean_variance, rel=1e-12, abs=0)
    assert data["max_variance"] == pytest.approx(event.max_variance, rel=1e-12, abs=0)
    assert [r["error95"] for r in data["releases"]] == pytest.approx(
        [r.error95 for r in event.releases], rel=1e-12
    )
    # the table: every row is the planner at M x Delta, monotone in M, the chosen row the plan
    rows = data["unit_costs"]
    for row in rows:
        direct = plan(mechanism, "total", 12, 0.5, 3.0 * row["multiplier"], noise)
        assert row["sensitivity"] == 3.0 * row["multiplier"]
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
        assert row["max_std"] == pytest.approx(math.sqrt(direct.max_variance), rel=1e-12)
    _assert_monotone(rows)
    (chosen,) = [r for r in rows if r["chosen"]]
    assert chosen["mean_std"] == pytest.approx(math.sqrt(data["mean_variance"]), rel=1e-12)
    event_row = rows[0]
    assert event_row["multiplier"] == 1
    for row in rows:  # the std is linear in M: exactly for continuous Laplace noise; the
        # discrete noise's variance is a little off the continuous one at small scales
        ratio = row["mean_std"] / event_row["mean_std"]
        rel = 1e-9 if noise == "laplace" else 2e-2
        assert ratio == pytest.approx(row["multiplier"], rel=rel)


def _assert_monotone(rows: list[dict[str, Any]]) -> None:
    assert [r["multiplier"] for r in rows] == sorted(r["multiplier"] for r in rows)
    for before, after in itertools.pairwise(rows):
        for key in ("mean_std", "max_std", "error95_at_horizon"):
            if after["multiplier"] > before["multiplier"]:
                assert after[key] > before[key]
            else:
                assert after[key] == before[key]


@pytest.mark.parametrize("mechanism", ["binary", "blt", "kary_gls"])
def test_the_zcdp_unit_plan_is_the_event_plan_at_m_times_the_l2_bound(
    mechanism: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, *ZCDP, "--mechanism", mechanism, *UNIT)
    event = plan_zcdp(mechanism, "total", 12, 0.25, 12 * 2.0)
    assert data["sensitivity"] == 24.0
    assert data["privacy"]["rho"] == 0.25
    assert data["mean_variance"] == pytest.approx(event.mean_variance, rel=1e-12, abs=0)
    assert data["max_variance"] == pytest.approx(event.max_variance, rel=1e-12, abs=0)
    # L2^2 = M^2 x the event's: the variance is M^2 times the event-level plan's
    one = plan_zcdp(mechanism, "total", 12, 0.25, 2.0)
    assert data["mean_variance"] == pytest.approx(144 * one.mean_variance, rel=1e-12)
    rows = data["unit_costs"]
    for row in rows:
        direct = plan_zcdp(mechanism, "total", 12, 0.25, 2.0 * row["multiplier"])
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
        assert row["mean_std"] / rows[0]["mean_std"] == pytest.approx(row["multiplier"], rel=1e-12)
    _assert_monotone(rows)


def test_a_zcdp_unit_is_planned_on_m_squared_times_the_events_integer_l2_square(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One event's changes are integers, so an L2 bound of 2.236 (just under sqrt 5) means
    ``Delta_2^2 = 4``, and a unit of M = 6 records ``L2^2 = 36 x 4 = 144``, as the engine
    calibrates; squaring ``6 x 2.236`` first planned 179 while the header said 180 (audit)."""
    argv = ("plan", "--horizon", "8", "--rho", "0.25", "--sensitivity", "2.2360679")
    bounds = ("--max-events-per-period", "2", "--max-periods-per-epoch", "3")
    data = _json(capsys, *argv, *bounds)
    assert data["sensitivity"] == 12.0
    assert data["mean_variance"] == pytest.approx(
        plan_zcdp("blt", "total", 8, 0.25, 12.0).mean_variance, rel=1e-12
    )
    assert main([*argv, *bounds]) == 0
    assert "M x Delta_2 = 6 x 2 = 12 (L2^2 = M^2 x 4 = 144)" in capsys.readouterr().out


def test_the_report_says_what_the_unit_plan_protects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PURE, *UNIT]) == 0
    out = capsys.readouterr().out
    assert out.startswith("protects one privacy unit (a patient, a device) per epoch")
    assert "at most 2 records in each of at most 6 periods" in out
    assert "M = 2 x 6 = 12 records per unit per epoch" in out
    assert "noise calibrated on sensitivity M x Delta = 12 x 3 = 36" in out
    assert "sensitivity 36  noise discrete-laplace" in out  # the plan's own header
    assert "cost of the privacy unit's bounds: records per period x periods per epoch" in out
    assert out.count("<- chosen") == 1
    assert main([*ZCDP, *UNIT]) == 0
    out = capsys.readouterr().out
    assert "noise calibrated on the L2 sensitivity M x Delta_2 = 12 x 2 = 24" in out
    assert "(L2^2 = M^2 x 4 = 576)" in out
    assert main([*PURE]) == 0  # per event: no unit, no table
    out = capsys.readouterr().out
    assert "privacy unit" not in out
    assert "M = " not in out


def test_target_std_and_compare_plan_at_the_unit_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ("plan", "--horizon", "12", "--sensitivity", "3", *UNIT)
    data = _json(capsys, *base, "--target-std", "100")
    epsilon, _ = epsilon_for_std(100.0, "fda", "total", 12, 36.0)
    assert data["epsilon_for_target"] == str(epsilon)
    assert data["privacy_unit"]["multiplier"] == 12
    rows = _json(capsys, *base, "--epsilon", "0.5", "--compare")
    assert {r["sensitivity"] for r in rows} == {36.0}
    rows = _json(capsys, *base, "--epsilon", "0.5", "--compare", "--delta", "1e-8")
    assert {r["sensitivity"] for r in rows} == {36.0}  # L1 and (default) L2 alike
    assert main([*base, "--epsilon", "0.5", "--compare"]) == 0
    assert "M = 2 x 6 = 12 records" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-events-per-period", "2"],
         "--max-events-per-period needs --max-periods-per-epoch"),
        (["--max-periods-per-epoch", "6"],
         "--max-periods-per-epoch needs --max-events-per-period"),
        (["--max-events-per-period", "0", "--max-periods-per-epoch", "6"],
         "--max-events-per-period must be an integer >= 1, got 0"),
        (["--max-events-per-period", "2", "--max-periods-per-epoch", "-3"],
         "--max-periods-per-epoch must be an integer >= 1, got -3"),
        (["--max-events-per-period", "2", "--max-periods-per-epoch", "13"],
         "--max-periods-per-epoch 13 is more than the 12 periods of an epoch (--horizon)"),
    ],
)  # fmt: skip
def test_bad_bounds_exit_2_with_one_line_naming_the_flag(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for base in (PURE, ZCDP):
        err = _error(capsys, *base, *extra)
        assert message in err
        assert err.count("\n") == 1


def test_bounds_that_are_not_integers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*PURE, "--max-events-per-period", "1.5", "--max-periods-per-epoch", "6"])
    assert exited.value.code == 2
    assert "invalid int value: '1.5'" in capsys.readouterr().err


def test_config_takes_the_bounds_from_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "plan", "--config", str(EXAMPLE), *UNIT)
    assert "drop --max-events-per-period, --max-periods-per-epoch" in err


def test_help_mentions_the_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "--max-events-per-period A" in out
    assert "--max-periods-per-epoch B" in out
    assert "privacy unit" in out
