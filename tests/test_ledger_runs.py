"""The ledger keeps its state's runs and per-stream maxima as entries are added (issue 15: a
checkpoint walked every entry, O(epochs)); what it reports must equal what the whole-history
walk reported, in the same order, for any sequence of spends and snapshot merges."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest

from streamdp.engine import BudgetLedger, MemoryLedgerBackend
from streamdp.engine.ledger import LedgerEntry
from streamdp.errors import BudgetError, StateError

SOURCES = ("people", "shops")
STREAMS = ("a", "b", "c")
EPSILONS = (Decimal("0.1"), Decimal("0.25"), Decimal("0.250"), Decimal("0.5"))


def runs_by_walking(entries: tuple[LedgerEntry, ...]) -> list[dict[str, Any]]:
    """The runs as ``BudgetLedger.state`` built them before (db2c901): one walk of every entry."""
    runs: dict[tuple[str, str, Decimal], list[list[int]]] = {}
    for e in entries:
        spans = runs.setdefault((e.source, e.stream, e.amount), [])
        if spans and spans[-1][1] == e.epoch - 1:
            spans[-1][1] = e.epoch
        else:
            spans.append([e.epoch, e.epoch])
    return [
        {"source": source, "stream": stream, "epsilon": str(epsilon), "epochs": span}
        for (source, stream, epsilon), spans in runs.items()
        for span in spans
    ]


def spent_by_walking(entries: tuple[LedgerEntry, ...], source: str) -> Decimal:
    """``BudgetLedger.spent`` as it was before: sum over streams of max over epochs."""
    per_stream: dict[str, Decimal] = {}
    for entry in entries:
        if entry.source == source:
            per_stream[entry.stream] = max(per_stream.get(entry.stream, Decimal(0)), entry.amount)
    return sum(per_stream.values(), Decimal(0))


def _stream_home(rng: random.Random) -> dict[str, tuple[str, Decimal]]:
    """Each stream reads one source; its epsilon usually stays, sometimes changes by epoch."""
    return {stream: (rng.choice(SOURCES), rng.choice(EPSILONS)) for stream in STREAMS}


def _snapshot(rng: random.Random, home: dict[str, tuple[str, Decimal]]) -> list[dict[str, Any]]:
    """Another ledger's state (runs) plus old-style single entries, in shuffled order, so a
    merge adds epochs out of order, before, between and after the epochs already known."""
    other = BudgetLedger({source: Decimal(1000) for source in SOURCES})
    for _ in range(rng.randint(1, 30)):
        stream = rng.choice(STREAMS)
        source, epsilon = home[stream]
        epoch = rng.randint(0, 40)
        if not other.has(stream, epoch):
            other.record_epoch(source, stream, epoch, _epsilon_of(rng, epsilon))
    entries = other.state()
    entries += [e.to_dict() for e in other.entries[: rng.randint(0, 3)]]
    rng.shuffle(entries)
    return entries


def _disagrees(ledger: BudgetLedger, entries: list[dict[str, Any]]) -> bool:
    """Whether a snapshot holds an amount for a known epoch that differs from the ledger's."""
    known = {(e.stream, e.epoch): e.amount for e in ledger.entries}
    for raw in entries:
        first, last = raw["epochs"] if "epochs" in raw else (raw["epoch"], raw["epoch"])
        for epoch in range(first, last + 1):
            amount = known.get((raw["stream"], epoch))
            if amount is not None and amount != Decimal(raw["epsilon"]):
                return True
    return False


def _epsilon_of(rng: random.Random, usual: Decimal) -> Decimal:
    return usual if rng.random() < 0.8 else rng.choice(EPSILONS)


@pytest.mark.parametrize("seed", range(60))
def test_kept_runs_and_maxima_equal_a_walk_of_every_entry(seed: int) -> None:
    """Random spends (repeats, gaps, epochs back in time, epsilon changes) and merges of
    shuffled snapshots; after every step the state, spends and a reopened ledger agree with
    the walk. A changed amount for a known epoch is refused and changes nothing."""
    rng = random.Random(seed)
    home = _stream_home(rng)
    backend = MemoryLedgerBackend()
    caps = {source: Decimal(1000) for source in SOURCES}
    ledger = BudgetLedger(caps, backend)
    for _ in range(rng.randint(20, 120)):
        if rng.random() < 0.15:
            entries = _snapshot(rng, home)
            if _disagrees(ledger, entries):  # refused part way: the entries before it stay
                with pytest.raises(StateError, match="two different spends"):
                    ledger.merge(entries)
            else:
                ledger.merge(entries)
        else:
            stream = rng.choice(STREAMS)
            source, usual = home[stream]
            epoch, epsilon = rng.randint(0, 40), _epsilon_of(rng, usual)
            known = {(e.stream, e.epoch): e.amount for e in ledger.entries}
            if known.get((stream, epoch), epsilon) != epsilon:
                with pytest.raises(BudgetError, match="cannot change"):
                    ledger.record_epoch(source, stream, epoch, epsilon)
            else:
                ledger.record_epoch(source, stream, epoch, epsilon)
        assert ledger.state() == runs_by_walking(ledger.entries)
        for source in SOURCES:
            assert ledger.spent(source) == spent_by_walking(ledger.entries, source)
    reopened = BudgetLedger(caps, backend)
    assert reopened.state() == ledger.state()
    assert [reopened.spent(s) for s in SOURCES] == [ledger.spent(s) for s in SOURCES]


def test_a_stream_rolling_every_epoch_keeps_one_run_and_the_state_is_a_copy() -> None:
    """10^4 consecutive epochs are one run; mutating what state() returned changes nothing."""
    ledger = BudgetLedger({"people": Decimal(1)})
    for epoch in range(10_000):
        ledger.record_epoch("people", "a", epoch, Decimal("0.5"))
    state = ledger.state()
    assert state == [{"source": "people", "stream": "a", "epsilon": "0.5", "epochs": [0, 9999]}]
    state[0]["epochs"][1] = 3
    assert ledger.state()[0]["epochs"] == [0, 9999]
    assert ledger.spent("people") == Decimal("0.5")
    with pytest.raises(BudgetError, match="over its cap"):
        ledger.record_epoch("people", "b", 0, Decimal("0.6"))
    assert ledger.spent("people") == Decimal("0.5")  # a refused spend leaves the maxima alone
