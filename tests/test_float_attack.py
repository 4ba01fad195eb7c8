"""The audit's floating-point attack on a tiny k-ary GLS stream (issue 25, Break 1).

One flag, horizon 2, ``kary_gls`` with k = 2, epsilon 1, OpenDP's secure sampler through the
engine (``benchmarks/float_attack.py``, which runs it at 3,000 trials per side). The attacker
searches every node noise near zero for one reproducing the two released floats under D (one
positive) and under D' (two). Today's releases are functions of the noisy nodes alone, so both
hypotheses always survive and presence is never proved. The power check: the same attacker on
the previous pipeline (exact total + float64 noise, rebuilt from the engine's stored noise of
the same runs) proves presence in about half of the D' runs, never in a D run. On the previous
code this test fails: its releases were that pipeline's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from streamdp.noise import production_sampler

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "float_attack.py"
TRIALS = 300


def _load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARK.parent))  # benchmarks import each other by name
    spec = importlib.util.spec_from_file_location("benchmark_float_attack", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_float_attack_proves_nothing_today_and_has_power_on_the_previous_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attack = _load(monkeypatch)
    attacker = attack.Attacker.build(10.0)  # 10 scales per node: ~1 run in 10^4 skipped
    outcomes = attack.attack(attacker, TRIALS, production_sampler())
    today, previous = outcomes["today"], outcomes["previous"]
    prime = attack.PRIME
    assert min(today.trials.values()) >= TRIALS - 5
    # the attacker's model of each pipeline is exact: the truth always survives
    assert today.truth_refuted == 0
    assert previous.truth_refuted == 0
    assert today.proved == {"D": 0, prime: 0}
    # power: the previous pipeline leaks in about half of the D' runs (audit: 45%)
    assert previous.proved["D"] == 0
    assert previous.proved[prime] >= 0.3 * previous.trials[prime]
    assert previous.epsilon_lower_bound() > 2.0
