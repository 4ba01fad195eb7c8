"""The demo's terminal board: the board's state as a ``rich`` renderable sized to the terminal.

Every line is cut (never wrapped) at the terminal's width, and counter rows are dropped before
anything else when the height is short, so an 80x24 terminal shows the whole board with its
header; the header lines (:func:`board_header`) and the tables fit 80 columns uncut. The
state drawn is a :class:`streamdp.demo.board.Board`; values are shown with the 95%
half-width of :mod:`streamdp.error_band`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from streamdp.demo.board import Board, StreamView
from streamdp.error_band import half_width95

#: The one-line legend under the terminal board.
LEGEND = "Negative counts are noise: unbiased, so do not clip them to 0. ±95%: 2.12 sd + 1"
#: Widths of the terminal board's columns (counter, then four numbers); with two spaces
#: between columns the table is 79 characters wide. The counter column holds the demo's
#: longest name (hiv_positive_admissions); the numbers hold "-1,234 ±157" and "12,345 ±1,234".
_COLUMN_WIDTHS = (23, 12, 13, 13, 10)
#: Their titles: the newest period's count and running total, then the running total released
#: for the matched period (the newest one with consistent values) and its consistent value.
_COLUMN_TITLES = ("counter", "newest count", "newest total", "matched total", "consistent")


def board_header(
    *,
    insecure: bool,
    ready: bool,
    elapsed: float,
    day: int,
    clock: str,
    port: int,
    feed_port: int | None,
) -> list[str]:
    """The board's three header lines, each under 80 columns for any value the demo shows
    (so an 80-column terminal cuts none): what the noise is and whether the worker is ready;
    the simulated day, the worker's public clock, the seconds run and how to stop; the
    addresses of the feed page and of the worker's metrics."""
    noise = "INSECURE seeded noise, NOT private" if insecure else "secure noise (OpenDP)"
    worker = "worker ready" if ready else "worker starting"
    feed = f"feed http://127.0.0.1:{feed_port}/ · " if feed_port else ""
    return [
        f"streamdp demo · {noise} · {worker}",
        f"simulated day {day} · public clock {clock} · {elapsed:.0f} s · Ctrl-C stops",
        f"{feed}metrics http://127.0.0.1:{port}/metrics",
    ]


def render_board(board: Board, header: Sequence[str] = (), height: int = 24) -> RenderableType:
    """The terminal board: ``header`` lines (:func:`board_header`), then per stream its newest
    period (count and running total) and, side by side, the running total released and the
    consistent one of the same period (:attr:`StreamView.matched`); then the budget per source, dead
    letters and a one-line legend. Fits ``height`` rows by showing fewer counters; every
    line is cut with an ellipsis at the console's width, never wrapped."""
    fixed = len(header) + 1 + len(board.streams) + 1 + len(board.caps) + 2
    rows = _share(max(0, height - fixed), [len(v.counters) for v in board.streams.values()])
    parts: list[RenderableType] = [_line(text) for text in header]
    parts.append(_table(_COLUMN_TITLES, [], show_header=True))
    for view, shown in zip(board.streams.values(), rows, strict=True):
        parts.append(_line(_stream_title(view, shown), style="bold"))
        parts.append(_table((), [_row(view, c) for c in view.counters[:shown]]))
    budget = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    # the source names are never cut (the demo's are 19 characters): the spend's title is
    budget.add_column("source", no_wrap=True, min_width=max(map(len, board.caps), default=6))
    budget.add_column(
        "epsilon spent / cap per epoch (event-level)", no_wrap=True, overflow="ellipsis"
    )
    budget.add_column("across epochs", no_wrap=True, overflow="ellipsis")
    for name, cap in sorted(board.caps.items()):
        across = board.sequential.get(name)
        budget.add_row(
            name,
            f"{board.spent.get(name, 0.0):g} / {cap:g}",
            "-" if across is None else f"{across:g}",
        )
    parts += [budget, _line(board.dead_letter_line()), _line(LEGEND, style="dim")]
    return Group(*parts)


def _stream_title(view: StreamView, shown: int) -> str:
    """Most important first (the line is cut at the terminal's width): the periods shown,
    then how many counters, the mechanism, the epsilon and the newest period's date."""
    latest, matched = view.latest, view.matched
    if latest is None:
        where = "waiting for the first period to close"
    else:
        where = f"epoch {latest[0]}: newest {view.unit} {latest[1]}/{view.horizon}"
    if matched is not None:
        where += f", matched {view.unit} {matched[1]}"
    else:
        where += ", no consistent values yet"
    total = len(view.counters) + view.hidden
    details = [f"{shown} of {total} counters"] if shown < total else []
    details += [view.mechanism, f"eps {view.epsilon}/epoch"]
    if latest is not None:
        details.append(view.starts.get(latest, "")[:10])
    return f"{view.name} {where} ({', '.join(details)})"


def _row(view: StreamView, counter: str) -> tuple[str, ...]:
    latest, matched = view.latest, view.matched
    newest = view.periods.get(latest, {}).get(counter) if latest is not None else None
    count = total = released = consistent = "-"
    if newest is not None:
        count = _pm(newest.count, newest.count_std)
        total = _pm(newest.total, newest.total_std)
    if matched is not None:
        cell = view.periods[matched].get(counter)
        fair = view.consistent_at[matched].get(counter)
        if cell is not None:
            released = _pm(cell.total, cell.total_std)
        if fair is not None:
            consistent = f"{fair[0]:,.1f}"
    return (counter, count, total, released, consistent)


def _pm(value: float, sd: float) -> str:
    """``value ±half-width`` of its 95% interval, with thousands separators (a real-valued
    release shown to the unit: its noise is far larger)."""
    return f"{value:,.0f} ±{half_width95(sd):,.0f}"


def _line(text: str, style: str = "") -> Text:
    """One terminal line: cut with an ellipsis at the console's width, never wrapped."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis", end="\n")


def _table(
    headers: Sequence[str], rows: list[tuple[str, ...]], *, show_header: bool = False
) -> Table:
    """The board's fixed-width columns (so each stream's table lines up under the one header)."""
    table = Table(box=None, show_header=show_header, pad_edge=False, padding=(0, 1), expand=False)
    names = headers or ("",) * len(_COLUMN_WIDTHS)
    for i, (name, width) in enumerate(zip(names, _COLUMN_WIDTHS, strict=True)):
        table.add_column(
            name,
            width=width,
            no_wrap=True,
            overflow="ellipsis",
            justify="left" if i == 0 else "right",
            header_style="bold",
        )
    for row in rows:
        table.add_row(*row)
    return table


def _share(rows: int, wanted: Sequence[int]) -> list[int]:
    """Split ``rows`` counter rows over streams wanting ``wanted`` rows each, one at a time in
    turn (every stream keeps its first counters before any stream gets a fifth)."""
    given = [0] * len(wanted)
    while rows > 0 and any(g < w for g, w in zip(given, wanted, strict=True)):
        for i, w in enumerate(wanted):
            if rows > 0 and given[i] < w:
                given[i] += 1
                rows -= 1
    return given
