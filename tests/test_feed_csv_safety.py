"""The feed's CSV downloads never hand a spreadsheet a formula (audit of 2026-11-28): a counter
named ``=1+2`` or a noise name ``@SUM(1)`` read from a topic was written as it was, and a
spreadsheet opening ``releases.csv`` would run it. Text cells starting like a formula get a
leading apostrophe; numbers, negative ones included, are written unchanged."""

from __future__ import annotations

import csv
import io

import pytest

from streamdp.feed.tables import to_csv

COLUMNS = ("counter", "noisy_count", "noisy_total")


@pytest.mark.parametrize("text", ["=1+2", "+SUM(A1)", "-2+3", "@SUM(1)", "\tx", "\r=x"])
def test_a_text_cell_starting_like_a_formula_is_written_as_text(text: str) -> None:
    rows = [{"counter": text, "noisy_count": -3, "noisy_total": -0.5}]
    (read,) = list(csv.DictReader(io.StringIO(to_csv(rows, COLUMNS), newline="")))
    assert read["counter"] == "'" + text
    assert read["noisy_count"] == "-3"  # numbers are never changed
    assert read["noisy_total"] == "-0.5"


def test_ordinary_text_is_unchanged() -> None:
    rows = [{"counter": "burger", "protects": "patient_id per epoch"}]
    (read,) = list(csv.DictReader(io.StringIO(to_csv(rows, ("counter", "protects")))))
    assert read == {"counter": "burger", "protects": "patient_id per epoch"}
