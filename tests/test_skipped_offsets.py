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
    for start, length in asked:
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
    assert skipped.covers("orders", 0, last, last + 1)
    skipped.add("orders", 0, last + 1, last + 3)  # touching: merged into one
    assert skipped.covers("orders", 0, last, last + 3)
    assert len(skipped._ranges[("orders", 0)]) == MAX_RANGES_PER_PARTITION
