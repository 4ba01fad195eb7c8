"""One record carrying a unit's identifier (forged, or the unit's own) moves at most
``M = a x max(b, 2)`` records, the multiplier the noise is calibrated on.

Audit of 2026-11-28: admission is first come, first counted per unit, so a record put first in a
period the unit had not used takes one of its ``b`` periods, and a period the unit used later is
dropped whole. With ``b = 1`` that moved ``a + 1`` records (and up to ``2a``) against a
calibration on ``a b = a``. Here every arrival order of a unit's records over a short epoch, with
one more record inserted at every place, is run through the real bookkeeping; then the same
forgery runs end to end on both paths with the same seeded noise.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from streamdp.engine import EngineSpec, parse_spec
from streamdp.engine.privacy_unit import PrivacyUnit, UnitBookkeeping, unit_multiplier
from tests.test_privacy_unit_streams import (
    SOURCE_PURE,
    START,
    STREAMS,
    _assert_within_unit_sensitivity,
    _background,
    _event,
    _moves,
    _via_daemon,
    _via_replay,
)

DIGEST = b"u" * 16
HORIZON = 4


def _counted(unit: PrivacyUnit, periods: list[int]) -> list[bool]:
    """Which of one unit's records, arriving with these periods in this order, count."""
    book = UnitBookkeeping(unit, HORIZON, "check")
    return [book.admit(DIGEST, period) for period in periods]


def _moved(unit: PrivacyUnit, periods: list[int], at: int, period: int) -> int:
    """Records whose fate changes when one more record of ``period`` arrives at ``at``."""
    without = _counted(unit, periods)
    with_r = _counted(unit, [*periods[:at], period, *periods[at:]])
    others = with_r[:at] + with_r[at + 1 :]
    return int(with_r[at]) + sum(a != b for a, b in zip(without, others, strict=True))


@pytest.mark.parametrize(("a", "b"), list(itertools.product((1, 2, 3), (1, 2, 3))))
def test_one_more_record_moves_at_most_the_multiplier_and_b_1_reaches_2a(a: int, b: int) -> None:
    unit = PrivacyUnit("patient_id", a, b)
    assert unit.multiplier == unit_multiplier(a, b) == a * max(b, 2)
    worst = 0
    for length in range(6):
        for periods in itertools.product(range(HORIZON), repeat=length):
            for at in range(length + 1):
                for period in range(HORIZON):
                    worst = max(worst, _moved(unit, list(periods), at, period))
    # and sequences longer than the bounds (the exhaustive ones above hold at most 6 records,
    # too few to exceed a multiplier of 6 or 9): random ones up to 3ab + 2 records
    rng = random.Random(a * 10 + b)
    longest = 0
    for _ in range(3000):
        periods = [rng.randrange(HORIZON) for _ in range(rng.randint(0, 3 * a * b + 2))]
        at, period = rng.randint(0, len(periods)), rng.randrange(HORIZON)
        worst = max(worst, _moved(unit, periods, at, period))
        # the unit's presence: all of its records count at most a x b, and some fill it
        counted = sum(_counted(unit, periods))
        assert counted <= a * b <= unit.multiplier
        longest = max(longest, counted)
    assert longest == a * b  # the search reaches the bound, so the check above can fail
    assert worst <= unit.multiplier
    if b == 1:
        # the calibration before the audit (a x b = a) is exceeded: the check has power
        assert worst == 2 * a > a * b


def _per_period(unit: PrivacyUnit, records: list[tuple[str, int]]) -> list[int]:
    """Counted records per period when ``records`` (owner, period) all carry one identifier."""
    counted = _counted(unit, [period for _, period in records])
    return [
        sum(c for c, (_, p) in zip(counted, records, strict=True) if p == period)
        for period in range(HORIZON)
    ]


def _removing_p_moves(unit: PrivacyUnit, records: list[tuple[str, int]]) -> int:
    both = _per_period(unit, records)
    only_q = _per_period(unit, [r for r in records if r[0] == "Q"])
    return sum(abs(x - y) for x, y in zip(both, only_q, strict=True))


@pytest.mark.parametrize(("a", "b"), [(1, 1), (1, 2), (2, 2)])
def test_two_people_under_one_identifier_are_each_protected_at_twice_the_change(
    a: int, b: int
) -> None:
    """What operating.md says of identifiers that read alike (``123`` and ``"123"``, NFC and
    NFD spellings, a collision, records written under someone else's identifier): removing
    one person P of two sharing an identifier with Q moves at most ``2ab <= 2M`` counted
    records (P's own, and Q's that P's had crowded out), and ``2ab`` is reached, beyond the
    ``M`` one unit is calibrated on whenever ``b >= 2``."""
    unit = PrivacyUnit("patient_id", a, b)
    worst = 0
    for length in range(6):
        for owners in itertools.product("PQ", repeat=length):
            for periods in itertools.product(range(HORIZON), repeat=length):
                worst = max(worst, _removing_p_moves(unit, list(zip(owners, periods, strict=True))))
    assert worst <= 2 * a * b <= 2 * unit.multiplier
    # reached: P's records first fill a periods' worth in b periods, Q's in b others are dropped
    crowding = [("P", p) for p in range(b) for _ in range(a)]
    crowding += [("Q", p) for p in range(b, 2 * b) for _ in range(a)]
    assert _removing_p_moves(unit, crowding) == 2 * a * b
    if b >= 2:
        assert 2 * a * b > unit.multiplier


def _forgery_spec(a: int, b: int, mechanism: str = "fda") -> EngineSpec:
    text = SOURCE_PURE + STREAMS.format(
        budget="epsilon = 0.5",
        mechanism=mechanism,
        unit_hiv=(
            'privacy_unit = { field = "patient_id", '
            f"max_events_per_period = {a}, max_periods_per_epoch = {b} }}"
        ),
        unit_census=(
            'privacy_unit = { field = "patient_id", max_events_per_period = 1, '
            "max_periods_per_epoch = 4 }"
        ),
        weights="",
    )
    return parse_spec(text)


def _victim_and_forgery(a: int) -> tuple[list[tuple[float, str]], tuple[float, str]]:
    """The victim's ``a`` admissions on day 3 (HIV+), and one forged record under the victim's
    identifier on day 1, arriving first."""
    day = 86400.0
    victim = []
    for i in range(a):
        ts = START + 3 * day + 600.0 * (i + 1)
        victim.append((ts + 60.0, json.dumps(_event(3000 + i, ts, "victim", True))))
    forged_at = START + 1 * day + 600.0
    return victim, (forged_at + 60.0, json.dumps(_event(4000, forged_at, "victim", True)))


@pytest.mark.parametrize("path", ["replay", "daemon"])
@pytest.mark.parametrize("a", [1, 2])
def test_a_forged_record_under_a_victims_identifier_stays_within_the_sensitivity(
    path: str, a: int, tmp_path: Path
) -> None:
    """b = 1: the forged day-1 record takes the victim's one period of the epoch, so the
    victim's a day-3 admissions stop counting and the forged one counts: a + 1 records move
    in the hiv stream, within its calibration M x Delta = 2a (it was a before the audit)."""
    spec = _forgery_spec(a, 1)
    assert spec.streams["hiv"].noise_sensitivity == 2 * a
    victim, forged = _victim_and_forgery(a)
    base_records = sorted(_background() + victim, key=lambda r: r[0])
    with_forged = sorted([*base_records, forged], key=lambda r: r[0])
    if path == "replay":
        base = _via_replay(spec, base_records, tmp_path / "d")
        other = _via_replay(spec, with_forged, tmp_path / "d1")
    else:
        base = _via_daemon(spec, base_records)
        other = _via_daemon(spec, with_forged, restart_after=5)
    counts, _ = _moves(base, other)
    assert counts[("hiv", 0)] == a + 1 > a  # the power: beyond the old calibration
    _assert_within_unit_sensitivity(spec, base, other)
