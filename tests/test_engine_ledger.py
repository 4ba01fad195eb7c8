"""Budget ledger: durable before release, never exceeded, epochs accounted per DESIGN §2;
epoch roll-over carries the noisy total, 'stop' ends the stream."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest
from test_engine_support import drive, releases

from streamdp.engine import BudgetLedger, Engine, JsonLinesLedgerBackend, parse_spec
from streamdp.errors import BudgetError, StateError
from streamdp.noise import InsecureSeededSampler

SPEC = """
[sources.people]
topic = "people"
kind = "person"
epsilon_cap = "1.0"

[streams.flags]
source = "people"
epsilon = "0.7"
sensitivity = 1
horizon = 4
on_epoch_end = "{end}"
period = {{ unit = "fixed", start = "2024-01-01T00:00:00Z", length = 60 }}
counters = {{ kind = "flag", field = "hiv_positive", name = "positives" }}
"""


def _events(periods: int, per_period: int = 3) -> list[str]:
    lines = []
    for j in range(periods):
        lines += [
            json.dumps(
                {
                    "event_id": f"{j}-{k}",
                    "event_time": 1704067200 + 60 * j + 10 * k,
                    "attributes": {"hiv_positive": True},
                }
            )
            for k in range(per_period)
        ]
    return lines


class Recorder:
    """Ledger backend that logs appends into a shared journal next to sampler draws."""

    def __init__(self, journal: list[str], fail: bool = False) -> None:
        self.journal = journal
        self.fail = fail

    def load(self) -> list[dict]:
        return []

    def append(self, entry: dict) -> None:
        if self.fail:
            raise OSError("disk full")
        self.journal.append(f"spend {entry['stream']} {entry['epoch']}")


class JournalSampler:
    name = "journal"
    secure = False

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        self.journal.append("draw")
        return np.zeros(size, dtype=np.int64)


def test_spend_is_durable_before_any_draw_or_release_and_failure_releases_nothing() -> None:
    spec = parse_spec(SPEC.format(end="roll"))
    journal: list[str] = []
    engine = Engine(spec, sampler=JournalSampler(journal), ledger_backend=Recorder(journal))
    outputs, _ = drive(engine, _events(9))
    assert journal[0] == "spend flags 0"
    assert journal.index("spend flags 1") < journal.index("draw", 5)  # before epoch 1's draws
    assert journal.count("spend flags 0") == 1
    assert len(releases(outputs)) == 8

    failing = Engine(spec, sampler=JournalSampler([]), ledger_backend=Recorder([], fail=True))
    with pytest.raises(OSError, match="disk full"):
        drive(failing, _events(2))
    assert failing.streams["flags"].closed == 0  # nothing released, period still open


def test_jsonl_backend_survives_restart_and_the_cap_holds_across_processes(tmp_path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = BudgetLedger({"people": Decimal("1.0")}, JsonLinesLedgerBackend(path))
    assert ledger.record_epoch("people", "a", 0, Decimal("0.7"))
    assert not ledger.record_epoch("people", "a", 0, Decimal("0.7"))  # idempotent
    assert ledger.record_epoch("people", "a", 1, Decimal("0.7"))  # disjoint epoch: parallel
    assert ledger.spent("people") == Decimal("0.7")
    assert ledger.sequential_spent("people") == Decimal("1.4")
    reopened = BudgetLedger({"people": Decimal("1.0")}, JsonLinesLedgerBackend(path))
    assert [e.to_dict() for e in reopened.entries] == [e.to_dict() for e in ledger.entries]
    assert reopened.record_epoch("people", "b", 0, Decimal("0.3"))  # 0.7 + 0.3 == 1.0 exactly
    # per stream, the largest epoch (what /metrics shows as a stream's spend), from the file
    assert reopened.stream_spent("people") == {"a": Decimal("0.7"), "b": Decimal("0.3")}
    assert reopened.stream_spent("nobody") == {}
    with pytest.raises(BudgetError, match=r"over its cap 1\.0"):
        reopened.record_epoch("people", "c", 0, Decimal("0.1"))
    with pytest.raises(BudgetError, match="cannot change"):
        reopened.record_epoch("people", "a", 0, Decimal("0.5"))
    path.write_text(path.read_text() + "{torn line\n")
    with pytest.raises(StateError, match="line 4 is not JSON"):
        BudgetLedger({"people": Decimal("1.0")}, JsonLinesLedgerBackend(path))


def test_engine_refuses_to_release_over_a_cap_already_spent_by_another_stream(tmp_path) -> None:
    path = tmp_path / "ledger.jsonl"
    BudgetLedger({"people": Decimal("1.0")}, JsonLinesLedgerBackend(path)).record_epoch(
        "people", "someone-else", 0, Decimal("0.5")
    )
    engine = Engine(
        parse_spec(SPEC.format(end="roll")),
        sampler=InsecureSeededSampler(0),
        ledger_backend=JsonLinesLedgerBackend(path),
    )
    with pytest.raises(BudgetError, match="over its cap"):
        drive(engine, _events(2))
    assert engine.streams["flags"].closed == 0


def test_roll_carries_the_noisy_total_and_stop_rejects_after_the_horizon() -> None:
    engine = Engine(parse_spec(SPEC.format(end="roll")), sampler=InsecureSeededSampler(2))
    outputs, _ = drive(engine, _events(11))
    rel = releases(outputs)
    assert [(r.epoch, r.period) for r in rel] == [(e, p) for e in range(3) for p in range(1, 5)][
        :10
    ]
    end_of_epoch0 = next(r for r in rel if (r.epoch, r.period) == (0, 4))
    first_of_epoch1 = next(r for r in rel if (r.epoch, r.period) == (1, 1))
    assert first_of_epoch1.noisy_total == end_of_epoch0.noisy_total + first_of_epoch1.noisy_count
    assert first_of_epoch1.total_std > first_of_epoch1.count_std  # carry adds variance
    assert engine.epsilon_spent() == {"people": Decimal("0.7")}
    assert engine.ledger.sequential_spent("people") == Decimal("2.1")

    stop = Engine(parse_spec(SPEC.format(end="stop")), sampler=InsecureSeededSampler(2))
    outputs, letters = drive(stop, _events(7), as_of=1704067200 + 60 * 7)
    assert len(releases(outputs)) == 4
    assert {d.reason for d in letters} == {"after_horizon"}
    assert len(letters) == 3 * 3  # periods 5..7, three events each


def test_a_failed_spend_at_epoch_roll_changes_nothing_and_can_be_retried() -> None:
    spec = parse_spec(SPEC.format(end="roll"))
    journal: list[str] = []
    backend = Recorder(journal)
    engine = Engine(spec, sampler=JournalSampler(journal), ledger_backend=backend)
    lines = _events(6)
    drive(engine, lines[: 3 * 4])  # periods 1..4 get events; 1..3 closed by the clock
    engine.close("flags", 1704067200 + 60 * 4)  # epoch 0 complete
    before = json.dumps(engine.snapshot(), sort_keys=True)
    backend.fail = True
    with pytest.raises(OSError, match="disk full"):
        engine.close("flags", 1704067200 + 60 * 5)  # needs epoch 1's spend
    assert json.dumps(engine.snapshot(), sort_keys=True) == before
    backend.fail = False
    outputs = engine.close("flags", 1704067200 + 60 * 5)
    assert [(r.epoch, r.period) for r in releases(outputs)] == [(1, 1)]
    assert len(engine.streams["flags"].node_values()) == 2  # epoch 0 kept once, epoch 1
