"""Consistent records are written by orjson (a wide revision serialises millions of map
entries): the text must carry exactly the values ``json.dumps`` would (every float its
shortest round-trip form), and no map entry may take more than ``counter_parts`` allows for,
or a part could pass Kafka's request limit."""

from __future__ import annotations

import json

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdp.engine.counter_values import CounterValues
from streamdp.engine.records import ConsistentRecord
from streamdp.engine.stream_revisions import _ENTRY_OVERHEAD, MAX_PART_BYTES, counter_parts

finite = st.floats(allow_nan=False, allow_infinity=False)


def _record(names: tuple[str, ...], values: np.ndarray, integers: np.ndarray) -> ConsistentRecord:
    view = CounterValues(names, values)
    whole = CounterValues(names, integers)
    return ConsistentRecord(
        stream="by-place", revision=3, periods_covered=9, epoch=1, period=2,
        period_start="2024-01-03T00:00:00Z", period_end="2024-01-04T00:00:00Z",
        counts=view, totals=view, constraint="tree", count_std=view, total_std=view,
        nonnegative_counts=whole, nonnegative_totals=whole,
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(finite, min_size=1, max_size=20),
    integers=st.lists(st.integers(min_value=0, max_value=2**62), min_size=20, max_size=20),
)
def test_the_text_carries_exactly_the_values_json_dumps_would(
    values: list[float], integers: list[int]
) -> None:
    names = tuple(f"c{i}" for i in range(len(values)))
    record = _record(
        names, np.asarray(values, dtype=np.float64), np.asarray(integers[: len(values)])
    )
    ours = json.loads(record.to_json())
    reference = json.loads(json.dumps(record.to_dict(), separators=(",", ":")))
    assert ours == reference
    # == says -0.0 == 0.0: the floats must be the same doubles, sign included
    for key in ("counts", "totals", "count_std", "total_std"):
        assert [repr(v) for v in ours[key].values()] == [repr(v) for v in values]
    assert list(ours) == list(reference)  # the same fields in the same order


@settings(max_examples=2000, deadline=None)
@given(value=finite)
def test_a_float_never_takes_more_than_the_entry_allowance(value: float) -> None:
    """The allowance per entry besides the name: quotes, colon, comma and the number."""
    assert len(orjson.dumps(value)) + 4 <= _ENTRY_OVERHEAD


def test_the_widest_numbers_keep_every_part_under_its_bound() -> None:
    """Every counter at the longest numbers orjson writes (24 characters): each part's text
    stays within MAX_PART_BYTES plus the record's fixed fields."""
    names = tuple(f"place-{i:07d}" for i in range(40_000))
    longest = np.full(len(names), -1.2345678901234567e-05)  # -0.000012345678901234567
    assert len(orjson.dumps(float(longest[0]))) == 24
    for lo, hi in counter_parts(names, maps=4):
        view = CounterValues(names, longest, lo, hi)
        record = ConsistentRecord(
            stream="by-place", revision=1, periods_covered=1, epoch=0, period=1,
            period_start="2024-01-01T00:00:00Z", period_end="2024-01-02T00:00:00Z",
            counts=view, totals=view, constraint="tree", count_std=view, total_std=view,
            part=1, parts=2,
        )  # fmt: skip
        assert len(record.to_json().encode()) <= MAX_PART_BYTES + 400
