"""The demo's view of the worker's output: release, consistent and dead-letter records in, state
and plain log lines out.

Pure state and formatting (no I/O), so the plain log lines are tested on their own; the
terminal board drawn from this state is :mod:`streamdp.demo.board_view`. Error bounds are the
95% band of :mod:`streamdp.error_band`.

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
from streamdp.error_band import half_width95
from streamdp.feed.records import parse_consistent, parse_release

#: Why dead letters outnumber the bad records sent (said wherever the demo counts them).
DEAD_LETTER_NOTE = "a record two streams refuse counts twice"
#: Counters shown per stream (the census stream has 43; the rest are on /metrics).
SHOWN_COUNTERS = 5
_STALE_AFTER = 3  # an incomplete period is printed as is once this many newer ones arrived
_KEEP_PERIODS = 64  # plain mode prints every period that arrived in full


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
        self.caps = {name: float(source.cap) for name, source in spec.sources.items()}
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
        # a record of no schema on a release topic (anyone who can write to it) is not shown,
        # as the feed does not show it; it never stops the demo (review: a KeyError did)
        parse = {"release": parse_release, "consistent": parse_consistent}.get(str(kind))
        if parse is None or parse(record) is None:
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
        the spend summed across epochs (one event in every epoch)."""
        parts = [
            f"{name} {self.spent.get(name, 0.0):g} / {cap:g}"
            for name, cap in sorted(self.caps.items())
        ]
        across = [f"{name} {self.sequential[name]:g}" for name in sorted(self.sequential)]
        line = "epsilon per epoch (event-level), spent / cap: " + ", ".join(parts)
        if across:
            line += "; summed across epochs (one event in each): " + ", ".join(across)
        return line

    def dead_letter_line(self) -> str:
        """``dead letters (N; a record two streams refuse counts twice): reason n, ...`` (most
        frequent first). Each stream of a source refuses a record on its own and leaves its own
        dead letter, so there are more dead letters than bad records sent."""
        total = sum(self.dead_letters.values())
        head = f"dead letters ({total}; {DEAD_LETTER_NOTE})"
        if not total:
            return head
        parts = [f"{reason} {n}" for reason, n in self.dead_letters.most_common()]
        return f"{head}: " + ", ".join(parts)

    def updates(self) -> list[str]:
        """Plain log lines for what is new since the last call: each period of each stream once
        its shown counters have all arrived (in period order), with each counter's noisy period
        count and running total, and each new consistent revision."""
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
                    f"{c} {cells[c].count:,.0f}±{half_width95(cells[c].count_std):,.0f} / "
                    f"{cells[c].total:,.0f}±{half_width95(cells[c].total_std):,.0f}"
                    for c in view.counters
                    if c in cells
                )
                lines.append(
                    f"release {view.name} epoch {at[0]} period {at[1]} "
                    f"({view.starts.get(at, '')[:10]}) period count / running total ±95%: "
                    f"{values}"
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
