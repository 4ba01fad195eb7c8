"""The feed's CSV downloads: their columns, in order, and the writer (pure)."""

from __future__ import annotations

import csv
import io
from typing import Any

#: Columns of ``releases.csv``, in order.
RELEASE_COLUMNS = (
    "stream",
    "source",
    "counter",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "noisy_count",
    "count_std",
    "count_half_width95",
    "noisy_total",
    "total_std",
    "total_half_width95",
    "epsilon",
    "budget_group",
    "budget_share",
    "mechanism",
    "sensitivity",
    "l2_sensitivity",
    "noise",
    "noise_secure",
    "rho",
    "privacy_delta",
    "protects",
    "unit_max_events_per_period",
    "unit_max_periods_per_epoch",
)
#: Columns of ``consistent.csv``, in order (one row per stream, period and counter).
CONSISTENT_COLUMNS = (
    "stream",
    "revision",
    "periods_covered",
    "constraint",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "counter",
    "consistent_count",
    "consistent_count_std",
    "consistent_count_half_width95",
    "consistent_total",
    "consistent_total_std",
    "consistent_total_half_width95",
    # places streams publishing them: biased, post-processed, tree-consistent (else empty)
    "nonnegative_count",
    "nonnegative_total",
)


def to_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """``rows`` as CSV text with a header; floats written with ``repr`` (exact round trip)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _cell(row[c]) for c in columns])
    return buffer.getvalue()


#: How a text cell may start that a spreadsheet would read as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:  # a field that does not apply (rho of a pure-DP release)
        return ""
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if isinstance(value, str) and text.startswith(FORMULA_STARTS):
        # a text (a counter's name, a spec's field) a spreadsheet would run as a formula is
        # written with a leading apostrophe, which spreadsheets show as text; numbers never
        return "'" + text
    return text
