"""Privacy-unit bookkeeping (issue 28): records beyond a unit's bounds are dropped in arrival
order, whether a record counts never depends on another unit's records, closed periods drop
their per-period counts and ended epochs everything, identifiers appear only as keyed digests,
and the state restores exactly (and only under the key it was kept with)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamdp.engine.privacy_unit import (
    KEY_CHECK_LABEL,
    PrivacyUnit,
    UnitBookkeeping,
    key_check,
    legacy_key_check,
    load_unit_key,
    unit_digest,
)
from streamdp.errors import ConfigError, StateError

UNIT = PrivacyUnit("patient_id", max_events_per_period=2, max_periods_per_epoch=3)
KEY = b"k" * 32
HORIZON = 16  # periods per epoch


def _digest(name: str) -> bytes:
    return unit_digest(KEY, name)


def _book() -> UnitBookkeeping:
    return UnitBookkeeping(UNIT, HORIZON, key_check(KEY))


def test_records_beyond_the_bounds_are_dropped_in_arrival_order() -> None:
    book = _book()
    a = _digest("a")
    assert [book.admit(a, 0) for _ in range(3)] == [True, True, False]  # 2 per period
    assert book.admit(a, 5)
    assert book.admit(a, 9)  # periods 0, 5, 9: three periods
    assert not book.admit(a, 12)  # a fourth period is refused ...
    assert book.admit(a, 5)  # ... a period already used still takes records to its bound
    assert not book.admit(a, 5)
    assert book.admit(a, HORIZON)  # the next epoch is a fresh start
    assert UNIT.multiplier == 6


def test_whether_a_record_counts_never_depends_on_another_units_records() -> None:
    """Any interleaving of other units' records leaves a unit's decisions unchanged."""
    rng = np.random.default_rng(3)
    mine = [int(p) for p in rng.integers(0, 8, size=40)]
    alone = _book()
    expected = [alone.admit(_digest("me"), p) for p in mine]
    assert True in expected
    assert False in expected  # the bounds bite: the check has power
    for trial in range(20):
        book = _book()
        got = []
        for p in mine:
            for _ in range(int(rng.integers(0, 4))):  # hostile others, any periods
                book.admit(_digest(f"other-{trial}-{rng.integers(5)}"), int(rng.integers(0, 8)))
            got.append(book.admit(_digest("me"), p))
        assert got == expected


def test_closing_a_period_and_ending_an_epoch_drop_their_counts() -> None:
    book = _book()
    a = _digest("a")
    book.admit(a, 0)
    book.admit(a, 1)
    book.close_period(0)
    assert list(book.log()) == [0, 1]  # the period still counts toward the epoch's bound
    assert book.units == 1
    with pytest.raises(StateError, match="closed"):
        book.admit(a, 0)
    book.admit(a, HORIZON + 1)  # the next epoch's open period, before this epoch ends
    for j in range(1, HORIZON):
        book.close_period(j)
    assert list(book.log()) == [HORIZON + 1]  # the ended epoch's log is gone
    assert book.units == 1
    assert book.admit(a, HORIZON + 2)
    assert book.admit(a, HORIZON + 3)
    assert not book.admit(a, HORIZON + 4)  # three periods in the new epoch


def test_identifiers_appear_only_as_keyed_digests_and_the_state_restores() -> None:
    book = _book()
    for name, period in (("alice-0042", 0), ("alice-0042", 2), ("bob-7", 2), ("bob-7", 2)):
        book.admit(_digest(name), period)
    book.close_period(0)
    text = json.dumps(book.state())
    assert "alice" not in text
    assert "bob" not in text
    assert unit_digest(KEY, "alice-0042") != unit_digest(b"x" * 32, "alice-0042")
    restored = UnitBookkeeping.from_state(UNIT, HORIZON, key_check(KEY), json.loads(text))
    assert restored.state() == book.state()
    bob = _digest("bob-7")
    assert not restored.admit(bob, 2)  # its per-period count came back
    assert restored.admit(_digest("alice-0042"), 3)
    with pytest.raises(StateError, match="different secret key"):
        UnitBookkeeping.from_state(UNIT, HORIZON, key_check(b"y" * 32), json.loads(text))
    broken = json.loads(text)
    broken["admitted"][1][1] += [bob.hex()]  # bob three times in period 2: over its bound
    with pytest.raises(StateError, match="over its bounds"):
        UnitBookkeeping.from_state(UNIT, HORIZON, key_check(KEY), broken)


def test_a_state_whose_digests_were_made_before_normalisation_is_refused() -> None:
    """Identifiers were hashed raw until they were normalised (NFC); the key tag was one
    label NFC leaves alone, so an old state restored silently and every unit spelt with a
    combining mark started again with nothing counted (a second allowance; restart audit).
    The tag now hashes a label NFC changes: a state tagged the old way is refused."""
    import hashlib
    import hmac

    def raw_digest(key: bytes, unit_id: str) -> bytes:  # the scheme before normalisation
        return hmac.new(key, unit_id.encode("utf-8"), hashlib.sha256).digest()[:16]

    old_tag = raw_digest(KEY, "streamdp.privacy-unit.key-check").hex()  # what states held
    assert old_tag != key_check(KEY)
    # the label's own point: NFC changes it, so the two schemes disagree on it
    assert raw_digest(KEY, KEY_CHECK_LABEL) != unit_digest(KEY, KEY_CHECK_LABEL)
    old = UnitBookkeeping(UNIT, HORIZON, old_tag)
    old.admit(raw_digest(KEY, "jose\u0301"), 0)
    with pytest.raises(StateError, match="hashed identifiers another way"):
        UnitBookkeeping.from_state(UNIT, HORIZON, key_check(KEY), old.state())
    # told the old tag (as the engine tells it), the refusal says how to upgrade
    assert legacy_key_check(KEY) == old_tag
    with pytest.raises(StateError, match="keep the version that wrote it running"):
        UnitBookkeeping.from_state(
            UNIT, HORIZON, key_check(KEY), old.state(), legacy_key_check=old_tag
        )
    # a state tagged the old way that holds no digest (an epoch just ended) restores, retagged
    empty = UnitBookkeeping(UNIT, HORIZON, old_tag).state()
    restored = UnitBookkeeping.from_state(
        UNIT, HORIZON, key_check(KEY), empty, legacy_key_check=old_tag
    )
    assert restored.state()["key_check"] == key_check(KEY)
    with pytest.raises(StateError, match="different secret key"):  # another key stays refused
        UnitBookkeeping.from_state(
            UNIT, HORIZON, key_check(KEY), empty, legacy_key_check=legacy_key_check(b"y" * 32)
        )


def test_bad_bounds_and_short_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_events_per_period"):
        PrivacyUnit("id", 0, 3)
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        unit_digest(b"short", "a")
    short = tmp_path / "unit.key"
    short.write_bytes(b"tooshort\n")
    with pytest.raises(ConfigError, match="holds 8 bytes"):
        load_unit_key(str(short))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_unit_key(str(tmp_path / "missing.key"))
    weak = tmp_path / "weak.key"
    weak.write_bytes(b"abababababababababababab\n")
    with pytest.raises(ConfigError, match="only 2 different byte values"):
        load_unit_key(str(weak))
    good = tmp_path / "good.key"
    good.write_bytes(b"0123456789abcdef0123\n")
    assert load_unit_key(str(good)) == b"0123456789abcdef0123"


def test_canonically_equivalent_spellings_of_an_identifier_are_one_unit() -> None:
    """Audit of 2026-11-28: "é" as one code point and as "e" plus a combining accent were two
    units, so one person written both ways had twice the bound."""
    key = b"k" * 32
    composed, decomposed = "jos\u00e9", "jose\u0301"
    assert composed != decomposed
    assert unit_digest(key, composed) == unit_digest(key, decomposed)
    assert unit_digest(key, composed) != unit_digest(key, "jose")
