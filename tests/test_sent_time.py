"""A record is judged at the instant its own Kafka timestamp states, not when it is received.

When the worker receives a record depends on the records in front of it (their fetches, their
processing on the event loop, a full input queue), so judging lateness at receipt lets one
record move another across a close instant (``benchmarks/arrival_race.py``). The Kafka
timestamp (``CreateTime``: when the producer sent it) is a fact of the record alone (a
``LogAppendTime`` stamp is not: the records queued at the broker in front of it move it, which
is why the input topics keep ``CreateTime``). The worker judges each record at that instant on
the public clock and releases a period ``--delivery-allowance`` seconds after its close instant,
so a record sent before the close that is received within the allowance counts, whatever came
before it. Checked here on the release service (neighbouring inputs whose receipt moments
differ), the tick schedule, the engine's acceptance window, and the record types both input
paths deliver.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from aiokafka.structs import ConsumerRecord
from closing_day import (
    ALLOWANCE,
    CENSUS,
    CLOSE,
    SOURCE,
    admission,
    day_counts,
    late,
    release_service,
)
from faust.types import TP
from faust.types.tuples import Message

from streamdp.daemon.arrival import sent_at
from streamdp.daemon.routing import InputRecord
from streamdp.daemon.tick_schedule import first_tick, next_tick
from streamdp.engine.clock import PublicClock
from streamdp.engine.open_periods import OpenPeriods
from streamdp.engine.periods import PeriodClock


def test_a_record_sent_before_the_close_counts_when_received_after_it() -> None:
    """Received 2 s after the close (within the allowance), a record sent 0.5 s before it
    counts; one sent 0.1 s after the close is late however early it is processed. Judged at
    receipt (the service without ``reading_at``), the first was late too."""
    now = [CLOSE + 2.0]
    runs = [
        [admission("sent-before", 0, sent=CLOSE - 0.5)],
        [admission("sent-after", 1, sent=CLOSE + 0.1)],
    ]
    judged = release_service(now, by_timestamp=True).process_runs(runs, [CLOSE + 2.0, CLOSE + 2.0])
    assert {d.event_id for d in judged.dead_letters} == {"sent-after"}
    assert late(judged) == {"sent-after"}
    at_receipt = release_service(now, by_timestamp=False).process_runs(
        runs, [CLOSE + 2.0, CLOSE + 2.0]
    )
    assert late(at_receipt) == {"sent-before", "sent-after"}


def test_a_record_without_a_timestamp_is_judged_at_receipt() -> None:
    """Received within the allowance, it counts; received after it, it is late."""
    now = [CLOSE + 2.0]
    outcome = release_service(now, by_timestamp=True).process_runs(
        [[admission("no-stamp", 0)]], [CLOSE + 2.0]
    )
    assert not outcome.dead_letters
    now = [CLOSE + ALLOWANCE]
    outcome = release_service(now, by_timestamp=True).process_runs(
        [[admission("no-stamp", 0)]], [now[0]]
    )
    assert late(outcome) == {"no-stamp"}


def test_received_after_the_release_instant_is_late_before_the_tick_runs() -> None:
    """A worker back from a downtime that outlasted the day's release instant (close plus
    allowance) reads a backlog of records sent before the close: each is late, whether it
    is processed before or after the first tick releases the day, so how far the fetches got
    by then changes nothing."""
    now = [CLOSE + ALLOWANCE + 60.0]
    service = release_service(now, by_timestamp=True)
    runs = [[admission(f"backlog-{i}", i, sent=CLOSE - 10.0 + i)] for i in range(3)]
    outcome = service.process_runs(runs, [now[0]] * 3)
    assert late(outcome) == {"backlog-0", "backlog-1", "backlog-2"}


def test_a_period_released_refuses_its_records_whatever_their_timestamp() -> None:
    """Once the day is released (at close + allowance), a record of it sent before the close
    but received only now is late: the allowance is the only wait."""
    now = [CLOSE + ALLOWANCE]
    service = release_service(now, by_timestamp=True)
    released = service.tick(CLOSE, stamp=CLOSE + ALLOWANCE)
    assert day_counts([released]), "the tick released the day"
    now[0] = CLOSE + ALLOWANCE + 0.5
    outcome = service.process_runs([[admission("straggler", 0, sent=CLOSE - 1.0)]], [now[0]])
    assert late(outcome) == {"straggler"}


def _world(hostile: bool, seed: int, *, by_timestamp: bool) -> tuple[set[str | None], dict]:
    """The closing day's records still arriving at its close: 300 records sent uniformly in
    the 50 ms before it, each received 2 ms after it was sent. With ``hostile``, one extra
    record comes first and its processing delays the receipt of every record after it by
    3 ms (as a burst in front does, on the event loop or in a full input queue). The day is
    released at close + allowance, closing at public reading ``CLOSE``."""
    rng = np.random.default_rng(seed)
    sent = np.sort(rng.uniform(CLOSE - 0.05, CLOSE, 300))
    wards = rng.choice(["medical", "icu"], 300)
    delay = 0.002 + (0.003 if hostile else 0.0)
    arrivals = [
        (f"d{i}", float(t), str(w), float(t) + delay)
        for i, (t, w) in enumerate(zip(sent, wards, strict=True))
    ]
    if hostile:
        arrivals.insert(0, ("hostile", CLOSE - 0.06, "icu", CLOSE - 0.058))
    now = [arrivals[-1][3]]
    service = release_service(now, by_timestamp=by_timestamp)
    refused: set[str | None] = set()
    for offset, (event_id, sent_at_, ward, received) in enumerate(arrivals):
        now[0] = received
        run = [admission(event_id, offset, sent=sent_at_, ward=ward)]
        refused |= late(service.process_runs([run], [received]))
    now[0] = CLOSE + ALLOWANCE
    return refused - {"hostile"}, day_counts([service.tick(CLOSE, stamp=CLOSE + ALLOWANCE)])


def test_one_record_delaying_the_others_moves_no_others_fate() -> None:
    """Neighbouring inputs D and D plus one record whose processing delays every later
    receipt: judged at their timestamps, D's records have the same fate in both and the day's
    release moves by at most its sensitivity (the same seeded noise). Power: judged at
    receipt, the same delay pushes D's records sent just before the close past it."""
    moved_at_receipt = 0
    for seed in range(20):
        late_d, day_d = _world(False, seed, by_timestamp=True)
        late_n, day_n = _world(True, seed, by_timestamp=True)
        assert late_d == late_n == set()
        assert day_d.keys() == day_n.keys()
        assert sum(abs(day_d[c] - day_n[c]) for c in day_d) <= CENSUS.sensitivity
        receipt_d, _ = _world(False, seed, by_timestamp=False)
        receipt_n, _ = _world(True, seed, by_timestamp=False)
        moved_at_receipt += receipt_d != receipt_n
    assert moved_at_receipt == 20, "the delay should move records judged at receipt"


def test_the_tick_after_a_close_waits_the_allowance_and_closes_at_the_close() -> None:
    """Ticks at each close instant plus the allowance, closing at the close instant's reading
    exactly; heartbeat ticks close at the reading of their instant minus the allowance; runs
    received before the tick's own instant are processed first."""
    clock = PublicClock()
    step = 0.5
    tick = first_tick(clock, step, CLOSE - 10.2, ALLOWANCE)
    assert tick.wall == CLOSE - 10.0
    assert tick.reading == CLOSE - 10.0 - ALLOWANCE
    assert tick.received == CLOSE - 10.0
    next_close = CLOSE - 10.0 - ALLOWANCE + 0.2  # its release falls before the next grid point
    at_close = next_tick(
        clock, step, tick, behind=False, next_close=next_close, allowance=ALLOWANCE
    )
    assert at_close.wall == CLOSE - 10.0 + 0.2
    assert at_close.reading == next_close  # exactly: the period closes
    assert at_close.received == at_close.wall
    frozen = PublicClock(origin=CLOSE, anchor=0.0, rate=0.0)
    idle = next_tick(frozen, step, tick, behind=False, next_close=math.inf, allowance=ALLOWANCE)
    assert idle.wall == tick.wall + step
    assert idle.reading == idle.received == CLOSE


def test_the_acceptance_window_kept_between_records_equals_a_fresh_one() -> None:
    """Set per record, the window is kept while the instant stays in the same periods: it
    must be exactly the window computed afresh, at period boundaries and a ulp either side,
    so that no record's window depends on the record judged before it."""
    rng = np.random.default_rng(11)
    clock = PeriodClock(CENSUS.period)
    edges = [clock.bounds(j)[0] for j in range(10)]
    lateness = CENSUS.allowed_lateness_seconds
    instants = []
    for edge in edges:
        for base in (edge, edge + lateness):
            instants += [base, math.nextafter(base, -math.inf), math.nextafter(base, math.inf)]
            instants += [base - 4e-7, base - 6e-7, base + 4e-7]  # datetime rounds to 1 us
    instants += list(rng.uniform(edges[0] - 86_400, edges[-1] + 86_400, 300))
    instants += [-math.inf, math.nan, 1e300]
    order = rng.permutation(len(instants))
    kept = OpenPeriods(CENSUS, clock)
    for index in order:
        now = float(instants[index])
        for before in (None, now - 600.0, now + 600.0):  # a window kept from nearby first
            for batch in (False, True):
                if before is not None:
                    kept.set_arrival(before, batch=batch)
                fresh = OpenPeriods(CENSUS, clock)
                fresh.set_arrival(now, batch=batch)
                kept.set_arrival(now, batch=batch)
                window = (kept._time_lo, kept._future_hi)
                assert window == (fresh._time_lo, fresh._future_hi), (before, now)


def test_both_input_paths_read_the_same_instant_from_a_record() -> None:
    """aiokafka's record (the batch path) gives milliseconds, Faust's Message (the per-event
    path) seconds: the same instant. No timestamp (-1 or None): judged at receipt."""
    stamp = 1_704_153_600_123
    kafka = ConsumerRecord("t", 0, 7, stamp, 0, b"k", b"v", None, 1, 1, ())
    assert sent_at(kafka) == stamp / 1000
    message = Message("t", 0, 7, stamp / 1000.0, 0, [], b"k", b"v", None, tp=TP("t", 0))
    assert sent_at(message) == sent_at(kafka)
    assert sent_at(InputRecord("t", 0, 7, b"k", b"v", -1)) is None
    assert sent_at(InputRecord("t", 0, 7, b"k", b"v")) is None


def test_every_instant_lies_in_the_bounds_of_its_period() -> None:
    """``bounds(index_of(t))`` holds ``t`` exactly, half a microsecond and one ulp either side
    of every boundary (``datetime`` rounds to the microsecond): days across a DST change,
    months, and fixed periods of a length that does not divide evenly. The engine caches a
    period by its bounds, so without this a record's period could depend on the record
    before it."""
    from streamdp.engine.spec import PeriodSpec

    clocks = [
        PeriodClock(PeriodSpec("day", "2024-03-01", "America/New_York")),
        PeriodClock(PeriodSpec("month", "2024-01-01", "Europe/Berlin")),
        PeriodClock(PeriodSpec("fixed", "2024-01-01T00:00:00.1+00:00", length_seconds=7)),
    ]
    for clock in clocks:
        for j in range(60):
            edge = clock.bounds(j)[0]
            for t in (
                edge,
                math.nextafter(edge, -math.inf),
                math.nextafter(edge, math.inf),
                edge - 4e-7,
                edge - 5e-7,
                edge - 6e-7,
                edge + 4e-7,
            ):
                lo, hi = clock.bounds(clock.index_of(t))
                assert lo <= t < hi, (clock.spec, j, t)


@pytest.mark.parametrize("protected_logs", [False, True])
def test_an_input_topic_stamped_by_the_broker_is_warned_about_once_where_logs_are_protected(
    protected_logs: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A LogAppendTime stamp moves with the records queued at the broker ahead of it: the
    worker judges it like any stamp. Where its logs are protected (--input-volume-metrics) it
    warns once per topic on arrival (naming the topic, no count); with public logs it does not
    (the warning's moment would say a record arrived; audit of 2026-11-28), and the start-up
    check warns from the topic's configuration instead. CreateTime records are never warned
    about."""
    now = [CLOSE - 30.0]
    service = release_service(now, by_timestamp=True, warn_broker_stamps=protected_logs)
    created = admission("c1", 0, sent=CLOSE - 31.0)
    service.process([created])
    assert "LogAppendTime" not in caplog.text
    for offset in (1, 2):
        appended = replace(admission(f"a{offset}", offset, sent=CLOSE - 31.0), timestamp_type=1)
        outcome = service.process([appended])
        assert outcome.accepted == 1  # judged like any stamp
    warnings = [r for r in caplog.records if "LogAppendTime" in r.getMessage()]
    if not protected_logs:
        assert warnings == []
        return
    assert len(warnings) == 1
    assert warnings[0].levelname == "WARNING"
    assert SOURCE in warnings[0].getMessage()


def test_a_late_dead_letter_says_which_of_the_two_instants_it_missed() -> None:
    """Sent after the close (the producer's side) and read after the release (the worker's
    lag) are both ``late``; the message tells the operator which to look at."""
    now = [CLOSE + 1.0]
    service = release_service(now, by_timestamp=True)
    sent_after = service.process([admission("after-close", 0, sent=CLOSE + 0.5)])
    service.tick(CLOSE, stamp=CLOSE + ALLOWANCE)  # the day is released
    now[0] = CLOSE + ALLOWANCE + 1.0
    read_after = service.process([admission("after-release", 1, sent=CLOSE - 1.0)])
    (first,) = [d for d in sent_after.dead_letters if d.reason == "late"][:1]
    (second,) = [d for d in read_after.dead_letters if d.reason == "late"][:1]
    assert "sent at or after its period's public close instant" in first.message
    assert "already released" not in first.message
    assert "already released when the record was read" in second.message
