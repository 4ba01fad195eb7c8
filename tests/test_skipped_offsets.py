"""Holes in input offsets that Kafka makes by design (a transaction's markers) are told apart
from records a reader lost (:mod:`streamdp.daemon.skipped_offsets`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamdp.daemon.skipped_offsets import MAX_RANGES_PER_PARTITION, SkippedOffsets

spans = st.tuples(st.integers(0, 80), st.integers(0, 10))


@given(st.lists(spans, max_size=15), st.lists(spans, min_size=1, max_size=20))
def test_covers_exactly_the_offsets_added(
    added: list[tuple[int, int]], asked: list[tuple[int, int]]
) -> None:
    skipped = SkippedOffsets()
    truth: set[int] = set()
    for start, length in added:
        skipped.add("orders", 3, start, start + length)
        truth |= set(range(start, start + length))
    for start, length in sorted(asked):  # as a batch is applied: in offset order
        expected = set(range(start, start + length)) <= truth
        assert skipped.covers("orders", 3, start, start + length) is expected
        assert not skipped.covers("orders", 4, start, start + 1)  # other partitions: nothing
        assert not skipped.covers("admissions", 3, start, start + 1)


def test_ranges_stay_merged_and_bounded() -> None:
    skipped = SkippedOffsets()
    markers = MAX_RANGES_PER_PARTITION + 10
    for marker in range(0, 3 * markers, 3):  # one marker every 3 offsets
        skipped.add("orders", 0, marker, marker + 1)
    kept = skipped._ranges[("orders", 0)]
    assert len(kept) == MAX_RANGES_PER_PARTITION
    assert not skipped.covers("orders", 0, 0, 1)  # the oldest were dropped
    last = 3 * markers - 3
    skipped.add("orders", 0, last + 1, last + 3)  # touching: merged into one
    assert len(skipped._ranges[("orders", 0)]) == MAX_RANGES_PER_PARTITION
    assert skipped.covers("orders", 0, last, last + 3)
    assert skipped._ranges[("orders", 0)] == [(last, last + 3)]  # those behind it dropped


def test_a_fetch_full_of_transaction_markers_is_told_from_lost_records() -> None:
    """Audit of 2026-11-28: one producer writing one-record transactions fills a fetch with
    a marker after every record; with 4,096 ranges kept, the first holes of a fetch holding
    more were taken for lost records (the worker stopped, the same after each restart). Here
    30,000 markers (more than a 4 MiB fetch holds) are noted as the client reads the fetch,
    then the holes are asked about in order as the batch is applied: every one is known, a
    lost record among them is not, and what is kept shrinks as the batch goes."""
    skipped = SkippedOffsets()
    markers = 30_000
    for i in range(markers):  # record at 2i, its transaction's commit marker at 2i + 1
        skipped.add("orders", 0, 2 * i + 1, 2 * i + 2)
    assert len(skipped._ranges[("orders", 0)]) == markers <= MAX_RANGES_PER_PARTITION
    for i in range(1, markers):  # applied 2(i-1); the next record is 2i: the hole is 2i - 1
        assert skipped.covers("orders", 0, 2 * i - 1, 2 * i)
    # the ranges behind the last hole asked about were dropped
    assert skipped._ranges[("orders", 0)] == [
        (2 * markers - 3, 2 * markers - 2),
        (2 * markers - 1, 2 * markers),
    ]
    assert not skipped.covers("orders", 0, 2 * markers - 1, 2 * markers + 1)  # one lost
