"""The demo's view of the worker's output: release, consistent and dead-letter records in, text out.

Pure state and formatting (no I/O), so the terminal table and the plain log lines are tested on
their own. Error bounds follow ``docs/consuming.md`` section 4: a 95% interval of a released value
with standard deviation ``sd`` is ``value +- (2.12 sd + 1)`` (2.12 = ln 20 / sqrt 2, the 95% point
of one Laplace variable, the worst case of a read path; +1 because the noise is an integer).

Only noisy values and their post-processing reach this module: the records of
``streamdp.releases`` and ``streamdp.consistent``, the reasons of ``streamdp.dead-letter`` and
the budget gauges of ``/metrics``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streamdp.engine.spec import EngineSpec

#: 95% half-width in standard deviations (docs/consuming.md section 4).
LAPLACE_95_SD = 2.12
#: Counters shown per stream (the census stream has 43; the rest are on /metrics).
SHOWN_COUNTERS = 5
_STALE_AFTER = 3  # an incomplete period is printed as is once this many newer ones arrived
_KEEP_PERIODS = 64  # plain mode prints every period that arrived in full


def half_width95(sd: float) -> float:
    """Half-width of the 95% interval of a released value with noise standard deviation ``sd``
    (same unit as the value, counts): ``2.12 sd + 1`` (docs/consuming.md section 4)."""
    return LAPLACE_95_SD * sd + 1.0


@dataclass(frozen=True)
class Cell:
    """One counter's release in one period: noisy values and their standard deviations."""

    count: int
    count_std: float
    total: int
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
    printed: set[tuple[int, int]] = field(default_factory=set)
    printed_revision: int | None = None

    @property
    def latest(self) -> tuple[int, int] | None:
        """(epoch, period) of the newest release seen, or None."""
        return max(self.periods) if self.periods else None


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
            int(record["noisy_count"]),
            float(record["count_std"]),
            int(record["noisy_total"]),
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
        if at >= view.revision_at:
            view.revision_at = at
            totals = record.get("totals") or {}
            view.consistent = {c: float(totals[c]) for c in view.counters if c in totals}

    def set_budget(self, metrics_text: str) -> None:
        """Read ``streamdp_source_epsilon_spent`` / ``_cap`` from a ``/metrics`` exposition."""
        for family in text_string_to_metric_families(metrics_text):
            if family.name not in {"streamdp_source_epsilon_spent", "streamdp_source_epsilon_cap"}:
                continue
            for sample in family.samples:
                source = sample.labels.get("source")
                if source is None:
                    continue
                if family.name.endswith("_cap"):
                    self.caps[source] = float(sample.value)
                else:
                    self.spent[source] = float(sample.value)

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
        """``budget (epsilon spent / cap): source s / c, ...``."""
        parts = [
            f"{name} {self.spent.get(name, 0.0):g} / {cap:g}"
            for name, cap in sorted(self.caps.items())
        ]
        return "budget (epsilon spent / cap per source): " + ", ".join(parts)

    def dead_letter_line(self) -> str:
        """``dead letters (N): reason n, ...`` (most frequent first)."""
        total = sum(self.dead_letters.values())
        if not total:
            return "dead letters (0)"
        parts = [f"{reason} {n}" for reason, n in self.dead_letters.most_common()]
        return f"dead letters ({total}): " + ", ".join(parts)

    def table(self) -> list[str]:
        """The terminal table: per stream its newest period and the latest consistent revision."""
        lines: list[str] = []
        for view in self.streams.values():
            latest = view.latest
            where = "waiting for the first period to close"
            if latest is not None:
                epoch, period = latest
                where = (
                    f"epoch {epoch}, {view.unit} {period}/{view.horizon} "
                    f"from {view.starts.get(latest, '')[:10]}"
                )
            revision = (
                f"consistent revision {view.revision} at period {view.revision_at[1]}"
                if view.revision is not None
                else "no consistent revision yet"
            )
            lines.append(
                f"{view.name}  ({view.mechanism}, eps {view.epsilon}/epoch)  {where};  {revision}"
            )
            fair_header = (
                f"consistent @{view.revision_at[1]}" if view.revision is not None else "consistent"
            )
            lines.append(
                f"  {'counter':<24}{'period count ±95%':>22}{'running total ±95%':>24}"
                f"{fair_header:>18}"
            )
            cells = view.periods.get(latest, {}) if latest is not None else {}
            for counter in view.counters:
                cell = cells.get(counter)
                count = total = "-"
                if cell is not None:
                    count = f"{cell.count:,} ±{half_width95(cell.count_std):,.0f}"
                    total = f"{cell.total:,} ±{half_width95(cell.total_std):,.0f}"
                consistent = view.consistent.get(counter)
                fair = "-" if consistent is None else f"{consistent:,.1f}"
                lines.append(f"  {counter:<24}{count:>22}{total:>24}{fair:>18}")
            if view.hidden:
                lines.append(f"  (+{view.hidden} more counters on /metrics and the topics)")
            lines.append("")
        lines.append(self.budget_line())
        lines.append(self.dead_letter_line())
        return lines

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
                    f"{c} {cells[c].total:,}±{half_width95(cells[c].total_std):,.0f}"
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
