"""The demo's view of the worker's output: release, consistent and dead-letter records in, text out.

Pure state and formatting (no I/O), so the terminal board and the plain log lines are tested on
their own. The terminal board is a ``rich`` renderable sized to the terminal: every line is cut
(never wrapped) at its width, and counter rows are dropped before anything else when the height
is short, so an 80x24 terminal shows the whole board with its header.

Error bounds follow ``docs/consuming.md`` section 4: a 95% interval of a released value
with standard deviation ``sd`` is ``value +- (2.12 sd + 1)`` (2.12 = ln 20 / sqrt 2, the 95% point
of one Laplace variable, the worst case of a read path; +1 because the noise is an integer).

Only noisy values and their post-processing reach this module: the records of
``streamdp.releases`` and ``streamdp.consistent``, the reasons of ``streamdp.dead-letter`` and
the budget gauges of ``/metrics``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from streamdp.engine.spec import EngineSpec

#: 95% half-width in standard deviations (docs/consuming.md section 4).
LAPLACE_95_SD = 2.12
#: Counters shown per stream (the census stream has 43; the rest are on /metrics).
SHOWN_COUNTERS = 5
_STALE_AFTER = 3  # an incomplete period is printed as is once this many newer ones arrived
_KEEP_PERIODS = 64  # plain mode prints every period that arrived in full
#: The one-line legend under the terminal board.
LEGEND = "Negative counts are noise: unbiased, so do not clip them to 0. ±95%: 2.12 sd + 1"
#: Widths of the terminal board's columns (counter, then four numbers); with one space each
#: side between columns the table is 77 characters wide.
_COLUMN_WIDTHS = (17, 13, 15, 15, 11)


def half_width95(sd: float) -> float:
    """Half-width of the 95% interval of a released value with noise standard deviation ``sd``
    (same unit as the value, counts): ``2.12 sd + 1`` (docs/consuming.md section 4)."""
    return LAPLACE_95_SD * sd + 1.0


@dataclass(frozen=True)
class Cell:
    """One counter's release in one period: noisy values and their standard deviations."""

    count: int | float  # real numbers for kary_gls releases
    count_std: float
    total: int | float
    total_std: float


@dataclass
class StreamView:
    """What the board holds of one stream."""

    name: str
    counters: tuple[str, ...]
    hidden: int
    mechanism: str
    horizon: int
    epsilon: str
    unit: str
    periods: dict[tuple[int, int], dict[str, Cell]] = field(default_factory=dict)
    starts: dict[tuple[int, int], str] = field(default_factory=dict)
    releases: int = 0
    pruned_through: tuple[int, int] = (-1, -1)
    revision: int | None = None
    revision_at: tuple[int, int] = (-1, -1)
    consistent: dict[str, float] = field(default_factory=dict)
    #: consistent running totals and their standard deviations by (epoch, period): a period's
    #: consistent values never change once published, so later revisions only add periods
    consistent_at: dict[tuple[int, int], dict[str, tuple[float, float]]] = field(
        default_factory=dict
    )
    printed: set[tuple[int, int]] = field(default_factory=set)
    printed_revision: int | None = None

    @property
    def latest(self) -> tuple[int, int] | None:
        """(epoch, period) of the newest release seen, or None."""
        return max(self.periods) if self.periods else None

    @property
    def matched(self) -> tuple[int, int] | None:
        """(epoch, period) of the newest period with both its release and its consistent values
        on the board: the period whose released and consistent running totals are shown side by
        side (the newest release is usually a few periods past the last revision)."""
        both = self.periods.keys() & self.consistent_at.keys()
        return max(both) if both else None


def _period_word(unit: str, length_seconds: int) -> str:
    if unit == "fixed":
        days = length_seconds / 86400
        return f"{days:g}-day period" if days >= 1 else f"{length_seconds}s period"
    return unit


class Board:
    """Live state of the demo: feed it output records, budget gauges and worker status."""

    def __init__(self, spec: EngineSpec, *, shown: int = SHOWN_COUNTERS) -> None:
        self.streams: dict[str, StreamView] = {}
        for name, stream in spec.streams.items():
            names = stream.counters.names
            self.streams[name] = StreamView(
                name=name,
                counters=names[:shown],
                hidden=max(0, len(names) - shown),
                mechanism=stream.mechanism,
                horizon=stream.horizon,
                epsilon=str(stream.epsilon),
                unit=_period_word(stream.period.unit, stream.period.length_seconds),
            )
        self.caps = {name: float(source.epsilon_cap) for name, source in spec.sources.items()}
        self.spent: dict[str, float] = {}
        self.sequential: dict[str, float] = {}
        self.dead_letters: Counter[str] = Counter()
        self.noise: str | None = None
        self.noise_secure: bool | None = None
        self.batches = 0
        self.ready = False

    # ------------------------------------------------------------------ input
    def add(self, record: Mapping[str, Any]) -> None:
        """Apply one decoded output record (``kind`` release, consistent or dead_letter)."""
        kind = record.get("kind")
        if kind == "dead_letter":
            self.dead_letters[str(record.get("reason", "?"))] += 1
            return
        view = self.streams.get(str(record.get("stream")))
        if view is None:
            return
        at = (int(record["epoch"]), int(record["period"]))
        if kind == "release":
            self._add_release(view, at, record)
        elif kind == "consistent":
            self._add_revision(view, at, record)

    def _add_release(
        self, view: StreamView, at: tuple[int, int], record: Mapping[str, Any]
    ) -> None:
        view.releases += 1
        if record.get("noise") is not None:
            self.noise = str(record["noise"])
            self.noise_secure = bool(record.get("noise_secure"))
        counter = str(record["counter"])
        if counter not in view.counters:
            return
        if at <= view.pruned_through:
            return  # a duplicate of a period already dropped from the board
        view.periods.setdefault(at, {})[counter] = Cell(
            _released(record["noisy_count"]),
            float(record["count_std"]),
            _released(record["noisy_total"]),
            float(record["total_std"]),
        )
        view.starts[at] = str(record.get("period_start", ""))
        for old in sorted(view.periods)[:-_KEEP_PERIODS]:
            view.pruned_through = max(view.pruned_through, old)
            del view.periods[old]
            view.starts.pop(old, None)

    @staticmethod
    def _add_revision(view: StreamView, at: tuple[int, int], record: Mapping[str, Any]) -> None:
        revision = int(record["revision"])
        if view.revision is not None and revision < view.revision:
            return
        if revision != view.revision:
            view.revision, view.revision_at, view.consistent = revision, (-1, -1), {}
        totals = record.get("totals") or {}
        stds = record.get("total_std") or {}
        if at > view.pruned_through:
            view.consistent_at[at] = {
                c: (float(totals[c]), float(stds.get(c, 0.0))) for c in view.counters if c in totals
            }
            for old in sorted(view.consistent_at)[:-_KEEP_PERIODS]:
                del view.consistent_at[old]
        if at >= view.revision_at:
            view.revision_at = at
            view.consistent = {c: float(totals[c]) for c in view.counters if c in totals}

    def set_budget(self, metrics_text: str) -> None:
        """Read the per-source budget gauges from a ``/metrics`` exposition: the event-level
        spend per epoch, the cap, and the sequential (across epochs) spend."""
        targets = {
            "streamdp_source_epsilon_spent": self.spent,
            "streamdp_source_epsilon_cap": self.caps,
            "streamdp_source_epsilon_sequential_spent": self.sequential,
        }
        for family in text_string_to_metric_families(metrics_text):
            target = targets.get(family.name)
            if target is None:
                continue
            for sample in family.samples:
                source = sample.labels.get("source")
                if source is not None:
                    target[source] = float(sample.value)

    def set_status(self, status: Mapping[str, Any]) -> None:
        """Take readiness, batch count and the noise sampler from the worker's ``/status``."""
        self.ready = bool(status.get("ready"))
        self.batches = int(status.get("batches_processed", 0))
        noise = status.get("noise")
        if isinstance(noise, Mapping):
            self.noise = str(noise.get("sampler", self.noise))
            self.noise_secure = bool(noise.get("secure"))

    # ------------------------------------------------------------------ output
    def budget_line(self) -> str:
        """The budget per source in one line: event-level spend per epoch against the cap, and
        the sequential (user-level) spend summed across epochs."""
        parts = [
            f"{name} {self.spent.get(name, 0.0):g} / {cap:g}"
            for name, cap in sorted(self.caps.items())
        ]
        across = [f"{name} {self.sequential[name]:g}" for name in sorted(self.sequential)]
        line = "epsilon per epoch (event-level), spent / cap: " + ", ".join(parts)
        if across:
            line += "; across epochs (sequential, user-level): " + ", ".join(across)
        return line

    def dead_letter_line(self) -> str:
        """``dead letters (N): reason n, ...`` (most frequent first)."""
        total = sum(self.dead_letters.values())
        if not total:
            return "dead letters (0)"
        parts = [f"{reason} {n}" for reason, n in self.dead_letters.most_common()]
        return f"dead letters ({total}): " + ", ".join(parts)

    def renderable(self, header: Sequence[str] = (), height: int = 24) -> RenderableType:
        """The terminal board: ``header`` lines, then per stream its newest period (count and
        running total) and, side by side, the running total released and the consistent one
        of the same period (:attr:`StreamView.matched`); then the budget per source, dead
        letters and a one-line legend. Fits ``height`` rows by showing fewer counters; every
        line is cut with an ellipsis at the console's width, never wrapped."""
        fixed = len(header) + 2 + len(self.streams) + 1 + len(self.caps) + 2
        rows = _share(max(0, height - fixed), [len(v.counters) for v in self.streams.values()])
        parts: list[RenderableType] = [_line(text) for text in header]
        counter_width, *number_widths = _COLUMN_WIDTHS
        newest_width = number_widths[0] + number_widths[1] + 2
        matched_width = number_widths[2] + number_widths[3] + 2
        parts.append(
            _line(
                " " * (counter_width + 1)
                + " newest period ".center(newest_width, "─")
                + "  "
                + " matched period ".center(matched_width, "─")
            )
        )
        parts.append(
            _table(
                ("counter", "count ±95%", "total ±95%", "total ±95%", "consistent"),
                [],
                show_header=True,
            )
        )
        for view, shown in zip(self.streams.values(), rows, strict=True):
            parts.append(_line(self._stream_title(view, shown), style="bold"))
            parts.append(_table((), [self._row(view, c) for c in view.counters[:shown]]))
        budget = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
        for title in ("source", "epsilon spent / cap per epoch (event-level)", "across epochs"):
            budget.add_column(title, no_wrap=True, overflow="ellipsis")
        for name, cap in sorted(self.caps.items()):
            across = self.sequential.get(name)
            budget.add_row(
                name,
                f"{self.spent.get(name, 0.0):g} / {cap:g}",
                "-" if across is None else f"{across:g} (sequential)",
            )
        parts += [budget, _line(self.dead_letter_line()), _line(LEGEND, style="dim")]
        return Group(*parts)

    def _stream_title(self, view: StreamView, shown: int) -> str:
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

    @staticmethod
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

    def updates(self) -> list[str]:
        """Plain log lines for what is new since the last call: each period of each stream once
        its shown counters have all arrived (in period order), and each new consistent revision."""
        lines: list[str] = []
        for view in self.streams.values():
            order = sorted(view.periods)
            for i, at in enumerate(order):
                cells = view.periods[at]
                if at in view.printed:
                    continue
                # records of one period may arrive on several partitions: wait for all of them
                # (in period order), unless newer periods show that the rest is not coming
                if len(cells) < len(view.counters) and len(order) - 1 - i < _STALE_AFTER:
                    break
                view.printed.add(at)
                values = "  ".join(
                    f"{c} {cells[c].total:,.0f}±{half_width95(cells[c].total_std):,.0f}"
                    for c in view.counters
                    if c in cells
                )
                lines.append(
                    f"release {view.name} epoch {at[0]} period {at[1]} "
                    f"({view.starts.get(at, '')[:10]}) running total ±95%: {values}"
                )
            if view.revision is not None and view.revision != view.printed_revision:
                if not view.consistent:
                    continue
                view.printed_revision = view.revision
                values = "  ".join(f"{c} {v:,.1f}" for c, v in view.consistent.items())
                lines.append(
                    f"consistent {view.name} revision {view.revision} (epoch "
                    f"{view.revision_at[0]} period {view.revision_at[1]}) total: {values}"
                )
        return lines


def _released(value: Any) -> int | float:
    """A released count or total as published: an int, or a real number (kary_gls)."""
    return value if isinstance(value, int) else float(value)


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
