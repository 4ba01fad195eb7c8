"""Privacy-unit bookkeeping (issue 28, the first part: not yet wired into streams): records
beyond a unit's bounds are dropped in arrival order, whether a record counts never depends on
another unit's records, closed periods and epochs drop their counts, identifiers appear only
as keyed digests, and the state restores exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamdp.engine.privacy_unit import PrivacyUnit, UnitBookkeeping, unit_digest
from streamdp.errors import ConfigError, StateError

UNIT = PrivacyUnit("patient_id", max_events_per_period=2, max_periods_per_epoch=3)
KEY = b"k" * 32


def _digest(name: str) -> bytes:
    return unit_digest(KEY, name)


def test_records_beyond_the_bounds_are_dropped_in_arrival_order() -> None:
    book = UnitBookkeeping(UNIT)
    a = _digest("a")
    assert [book.admit(a, 0) for _ in range(3)] == [True, True, False]  # 2 per period
    assert book.admit(a, 5)
    assert book.admit(a, 9)  # periods 0, 5, 9: three periods
    assert not book.admit(a, 12)  # a fourth period is refused ...
    assert book.admit(a, 5)  # ... a period already used still takes records to its bound
    assert not book.admit(a, 5)
    assert UNIT.multiplier == 6


def test_whether_a_record_counts_never_depends_on_another_units_records() -> None:
    """Any interleaving of other units' records leaves a unit's decisions unchanged."""
    rng = np.random.default_rng(3)
    mine = [int(p) for p in rng.integers(0, 8, size=40)]
    alone = UnitBookkeeping(UNIT)
    expected = [alone.admit(_digest("me"), p) for p in mine]
    for trial in range(20):
        book = UnitBookkeeping(UNIT)
        got = []
        for p in mine:
            for _ in range(int(rng.integers(0, 4))):  # hostile others, any periods
                book.admit(_digest(f"other-{trial}-{rng.integers(5)}"), int(rng.integers(0, 8)))
            got.append(book.admit(_digest("me"), p))
        assert got == expected


def test_closing_a_period_and_rolling_an_epoch_drop_their_counts() -> None:
    book = UnitBookkeeping(UNIT)
    a = _digest("a")
    book.admit(a, 0)
    book.admit(a, 1)
    book.close_period(0)
    assert (a, 0) not in book.events
    assert book.periods[a] == [0, 1]  # the period still counts toward the epoch's bound
    book.roll_epoch(1)
    assert book.units == 0
    assert book.admit(a, 8)
    with pytest.raises(StateError):
        book.roll_epoch(1)


def test_identifiers_appear_only_as_keyed_digests_and_the_state_restores() -> None:
    book = UnitBookkeeping(UNIT)
    for name, period in (("alice-0042", 0), ("alice-0042", 2), ("bob-7", 2)):
        book.admit(_digest(name), period)
    text = json.dumps(book.state())
    assert "alice" not in text
    assert "bob" not in text
    assert unit_digest(KEY, "alice-0042") != unit_digest(b"x" * 32, "alice-0042")
    restored = UnitBookkeeping.from_state(UNIT, json.loads(text))
    assert restored == book
    broken = json.loads(text)
    broken["events"][0][2] = 99
    with pytest.raises(StateError):
        UnitBookkeeping.from_state(UNIT, broken)


def test_bad_bounds_and_short_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_events_per_period"):
        PrivacyUnit("id", 0, 3)
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        unit_digest(b"short", "a")
