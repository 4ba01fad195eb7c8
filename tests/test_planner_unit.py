"""The planner's cost of a privacy unit's bounds (issue 28): every row is the planner's own
computation at M times one event's sensitivity (L1 for pure DP, L2 under zCDP), the chosen
bounds are the stream as configured, and the table grows with M."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from streamdp.engine.spec_loading import parse_spec
from streamdp.planner.accuracy import plan
from streamdp.planner.unit_cost import alternative_bounds
from streamdp.planner.zcdp import plan_zcdp

EXAMPLE = Path(__file__).resolve().parents[1] / "streamdp" / "examples" / "hospital_patients.toml"


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdp", "plan", *args],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_each_row_is_the_planner_at_m_times_one_events_sensitivity() -> None:
    done = _plan("--config", str(EXAMPLE), "--format", "json")
    assert done.returncode == 0, done.stderr
    streams = {entry["stream"]: entry for entry in json.loads(done.stdout)}
    hiv = streams["hiv-admissions"]
    assert hiv["sensitivity"] == 12  # 2 a month x 6 months x Delta = 1
    rows = hiv["unit_costs"]
    for row in rows:
        direct = plan("fda", "total", 12, 0.5, float(row["multiplier"]))
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
        assert row["max_std"] == pytest.approx(math.sqrt(direct.max_variance), rel=1e-12)
    chosen = [r for r in rows if r["chosen"]]
    assert [(r["max_events_per_period"], r["max_periods_per_epoch"]) for r in chosen] == [(2, 6)]
    assert chosen[0]["mean_std"] == pytest.approx(math.sqrt(hiv["mean_variance"]), rel=1e-12)
    multipliers = [r["multiplier"] for r in rows]
    stds = [r["mean_std"] for r in rows]
    assert multipliers == sorted(multipliers)
    assert stds == sorted(stds)
    assert stds[-1] > 40 * stds[0]  # M = 48 against one event: the bounds cost real accuracy


def test_a_zcdp_stream_is_planned_at_m_times_its_l2_bound(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("epsilon_cap = 1.0", "rho_cap = 1.0")
    text = text.replace("epsilon = 0.5", 'privacy = { definition = "zcdp", rho = 0.25 }')
    text = text.replace("horizon = 12\n", 'horizon = 12\nmechanism = "binary"\n')
    text = text.replace("horizon = 365\n", 'horizon = 365\nmechanism = "binary"\n')
    config = tmp_path / "zcdp.toml"
    config.write_text(text)
    spec = parse_spec(text)
    hiv = spec.streams["hiv-admissions"]
    assert hiv.l2_squared == 144  # (12 x 1)^2
    done = _plan("--config", str(config), "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = {e["stream"]: e for e in json.loads(done.stdout)}["hiv-admissions"]["unit_costs"]
    for row in rows:
        direct = plan_zcdp("binary", "total", 12, Fraction(1, 4), float(row["multiplier"]))
        assert row["mean_std"] == pytest.approx(math.sqrt(direct.mean_variance), rel=1e-12)
    assert replace(hiv, privacy_unit=None).unit_multiplier == 1


def test_the_table_names_the_unit_and_marks_the_chosen_bounds() -> None:
    done = _plan("--config", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert "stream hiv-admissions: protects patient_id per epoch" in done.stdout
    assert "cost of the privacy unit's bounds (patient_id)" in done.stdout
    assert done.stdout.count("<- chosen") == 2


def test_alternative_bounds_stay_within_the_horizon_and_start_at_one_event() -> None:
    pairs = alternative_bounds(2, 6, 8)
    assert pairs[0] == (1, 1)
    assert (2, 6) in pairs
    assert all(1 <= b <= 8 for _, b in pairs)
    assert (4, 8) in pairs  # 2b capped at the horizon
