"""Plain-text tables for the planner's terminal output: right-aligned columns as wide as their
widest cell, so a value in e-notation or a large multiplier never pushes a row out of line."""

from __future__ import annotations

from collections.abc import Sequence


def aligned_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], gap: int = 2) -> list[str]:
    """``headers`` then each row, every column right-aligned to its widest cell and columns
    separated by ``gap`` spaces. A row may carry one trailing cell more than ``headers`` (a
    note such as ``<- chosen``); it is appended unaligned."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    spacer = " " * gap

    def line(cells: Sequence[str]) -> str:
        body = spacer.join(c.rjust(w) for c, w in zip(cells, widths, strict=False))
        extra = cells[len(widths) :]
        return body + "".join(f"  {e}" for e in extra if e)

    return [line(headers), *(line(row) for row in rows)]
