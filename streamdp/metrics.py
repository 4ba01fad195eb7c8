"""The Prometheus metrics catalogue of the streamdp worker (DESIGN.md §5, "Operations").

The metric *names, types and labels* defined here are a contract: the Prometheus alert rules,
the Grafana dashboard and the operator guide in ``deploy/`` and ``docs/`` use them, and the
deploy tests check that every query names only metrics listed in :data:`CATALOGUE`.

Naming rules (checked by ``tests/test_metrics.py``): one ``streamdp_`` prefix, base units
(seconds, records, epsilon is dimensionless), ``_total`` on counters only, ``_seconds`` /
``_records`` suffixes naming the unit, and labels drawn only from small sets fixed by the
configuration (``stream``, ``source``, ``counter``, ``topic``) or by the code (``reason``,
and the build's ``version`` and ``sampler``).
Never a period index, an event id, or anything else derived from the data.

Privacy. Every value exported here is a function of the configuration, the clock, or already
published noisy outputs — except the *input-volume* metrics (:data:`INPUT_VOLUME_METRICS`):
records read, records rejected and consumer lag reveal how many records arrived on the input
topics, exactly like the topics' offsets do. They are registered only when
``input_volume=True``; operators whose Prometheus sits outside the trust zone of the input
topics must turn them off (see ``docs/operating.md``). No raw count is ever exported.

The module depends on ``prometheus_client`` only (no Faust), so the engine, the file replayer and
the tests can all use it. A worker serves :meth:`StreamdpMetrics.exposition` on ``/metrics``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streamdp.engine.events import REASONS

PREFIX = "streamdp_"

MetricKind = Literal["gauge", "counter", "histogram"]

#: Reasons an input record is not counted: the engine's fixed set (every one sends the record
#: to ``streamdp.dead-letter``). Re-deliveries after a crash are skipped, not rejected.
REJECTION_REASONS: frozenset[str] = frozenset(REASONS)

#: Buckets of the consistency-run duration histogram, seconds (1 ms .. 2 min).
CONSISTENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
#: Buckets of the period-close latency histogram, seconds (10 ms .. 10 min).
CLOSE_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    600.0,
)


@dataclass(frozen=True)
class MetricSpec:
    """One metric family of the catalogue.

    ``name`` is the name Prometheus shows: counters end in ``_total`` here, and
    :func:`exported_sample_names` expands histograms to their ``_bucket``/``_sum``/``_count``
    series.
    """

    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    help: str
    input_volume: bool = False


CATALOGUE: tuple[MetricSpec, ...] = (
    # --- privacy budget: read from the durable ledger at every scrape (custom collector) ------
    MetricSpec(
        "streamdp_epsilon_spent",
        "gauge",
        ("stream", "source"),
        "Epsilon the durable ledger records as spent by this stream on this input source in its "
        "current epoch (pure epsilon-DP, event level).",
    ),
    MetricSpec(
        "streamdp_stream_epsilon",
        "gauge",
        ("stream", "source"),
        "Epsilon the stream is configured to spend per epoch (its horizon of N periods).",
    ),
    MetricSpec(
        "streamdp_source_epsilon_spent",
        "gauge",
        ("source",),
        "Epsilon spent on this input source by all streams reading it (they compose: sum).",
    ),
    MetricSpec(
        "streamdp_source_epsilon_cap",
        "gauge",
        ("source",),
        "Epsilon cap the configuration declares for this input source.",
    ),
    MetricSpec(
        "streamdp_source_epsilon_sequential_spent",
        "gauge",
        ("source",),
        "Epsilon summed over every epoch of every stream of this source: what one person "
        "contributing events in every epoch could lose (user level; grows as epochs roll; the "
        "event-level spend is streamdp_source_epsilon_spent).",
    ),
    MetricSpec(
        "streamdp_source_epsilon_headroom",
        "gauge",
        ("source",),
        "Epsilon cap minus event-level spend of this input source (exact decimal arithmetic): "
        "how much more epsilon per epoch the ledger would still accept on it. 0 is normal when "
        "the configured streams commit the whole cap by design.",
    ),
    MetricSpec(
        "streamdp_stream_next_epoch_epsilon",
        "gauge",
        ("stream", "source"),
        "Event-level epsilon the stream's next ledger spend adds to its source: its epsilon per "
        "epoch minus the largest epsilon of the epochs already recorded (epochs compose in "
        "parallel), so 0 for a stream rolling into another epoch at an unchanged epsilon. The "
        "ledger refuses that spend (the worker stops) when this exceeds "
        "streamdp_source_epsilon_headroom.",
    ),
    # --- horizon and epochs ----------------------------------------------------------------
    MetricSpec(
        "streamdp_horizon_periods",
        "gauge",
        ("stream",),
        "Horizon N: the most periods the stream releases per epoch.",
    ),
    MetricSpec(
        "streamdp_periods_released",
        "gauge",
        ("stream",),
        "Periods released so far in the stream's current epoch (0..N).",
    ),
    MetricSpec("streamdp_epoch", "gauge", ("stream",), "Current epoch of the stream (0-based)."),
    MetricSpec(
        "streamdp_period_seconds",
        "gauge",
        ("stream",),
        "Length of the stream's current period in seconds (calendar periods vary).",
    ),
    MetricSpec(
        "streamdp_allowed_lateness_seconds",
        "gauge",
        ("stream",),
        "Allowed lateness of the stream: a period closes this long after its end (event time).",
    ),
    # --- releases (public noisy outputs only) -------------------------------------------------
    MetricSpec(
        "streamdp_releases_published_total",
        "counter",
        ("stream",),
        "Release records written to streamdp.releases (one per counter per period, idempotent "
        "re-publications after a restart included).",
    ),
    MetricSpec(
        "streamdp_last_release_timestamp_seconds",
        "gauge",
        ("stream",),
        "Wall-clock time (Unix seconds) at which the stream's latest period release was published.",
    ),
    MetricSpec(
        "streamdp_build",
        "gauge",
        ("version", "sampler"),
        "Always 1: the worker's streamdp version and the name of the noise sampler its releases "
        "are drawn with (labels fixed by the code).",
    ),
    MetricSpec(
        "streamdp_noise_secure",
        "gauge",
        (),
        "1 when releases use the production sampler (OpenDP's exact discrete Laplace), 0 for "
        "the INSECURE seeded sampler of tests and demos, whose releases are not private.",
    ),
    MetricSpec(
        "streamdp_release_stddev",
        "gauge",
        ("stream",),
        "Expected standard deviation of the latest noisy running total (exact variance of the "
        "discrete noise; equal for every counter of the stream, which share one strategy).",
    ),
    MetricSpec(
        "streamdp_release_cumulative",
        "gauge",
        ("stream", "counter"),
        "Latest NOISY running total released for the counter (already public on "
        "streamdp.releases; never a raw count).",
    ),
    MetricSpec(
        "streamdp_consistent_cumulative",
        "gauge",
        ("stream", "counter"),
        "Running total of the latest period in the latest consistent revision (post-processing "
        "of noisy releases; already public on streamdp.consistent).",
    ),
    # --- consistency (post-processing of noisy values) ---------------------------------------
    MetricSpec(
        "streamdp_consistency_runs_total",
        "counter",
        ("stream",),
        "Consistency runs completed (each publishes one revision).",
    ),
    MetricSpec(
        "streamdp_consistency_residual",
        "gauge",
        ("stream",),
        "Largest absolute constraint violation |C y - b| of the latest consistent revision "
        "(counts; the projection is exact, so only floating-point rounding, far below 1e-3).",
    ),
    MetricSpec(
        "streamdp_consistency_duration_seconds",
        "histogram",
        ("stream",),
        "Wall time of consistency runs.",
    ),
    MetricSpec(
        "streamdp_period_close_latency_seconds",
        "histogram",
        ("stream",),
        "Wall time from a period's close condition (watermark past end plus lateness, or a "
        "close control record) to its releases being published.",
    ),
    # --- input volume: reveals record counts like topic offsets do (optional) -------------------
    MetricSpec(
        "streamdp_input_records_total",
        "counter",
        ("topic",),
        "Records read from the input topic.",
        input_volume=True,
    ),
    MetricSpec(
        "streamdp_events_rejected_total",
        "counter",
        ("topic", "reason"),
        "Dead letters by reason: one per refusing stream (a record two streams refuse counts "
        "twice); every one goes to the dead-letter topic.",
        input_volume=True,
    ),
    MetricSpec(
        "streamdp_consumer_lag_records",
        "gauge",
        ("topic",),
        "Records on the input topic not yet processed by this worker (sum over its partitions).",
        input_volume=True,
    ),
)

#: Names of the families that reveal input volume (registered only with ``input_volume=True``).
INPUT_VOLUME_METRICS: frozenset[str] = frozenset(m.name for m in CATALOGUE if m.input_volume)

_BUDGET_METRICS = (
    "streamdp_epsilon_spent",
    "streamdp_stream_epsilon",
    "streamdp_source_epsilon_spent",
    "streamdp_source_epsilon_cap",
    "streamdp_source_epsilon_sequential_spent",
    "streamdp_source_epsilon_headroom",
    "streamdp_stream_next_epoch_epsilon",
)


def spec(name: str) -> MetricSpec:
    """The catalogue entry called ``name`` (a family name as in :data:`CATALOGUE`)."""
    for entry in CATALOGUE:
        if entry.name == name:
            return entry
    raise KeyError(f"{name!r} is not a streamdp metric; see streamdp.metrics.CATALOGUE")


def exported_sample_names(*, include_created: bool = True) -> frozenset[str]:
    """Every sample name a streamdp ``/metrics`` page can contain.

    Histograms expand to ``_bucket``, ``_sum`` and ``_count``; counters and histograms also get
    the ``_created`` timestamp that prometheus_client exports (``include_created``).
    These are the names a PromQL expression may select.
    """
    names: set[str] = set()
    for entry in CATALOGUE:
        if entry.kind == "gauge":
            names.add(entry.name)
        elif entry.kind == "counter":
            names.add(entry.name)
            if include_created:
                names.add(entry.name.removesuffix("_total") + "_created")
        else:
            names.update(entry.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            if include_created:
                names.add(entry.name + "_created")
    return frozenset(names)


#: An epsilon as the ledger holds it (exact decimal) or as a float from a test or an exporter.
Epsilon = Decimal | float


def exact_epsilon(value: Epsilon) -> Decimal:
    """``value`` as an exact decimal: a Decimal as is, a float by its shortest repr (so a float
    made from a configured decimal such as 0.1 gives back exactly 0.1, not 0.10000000000000000555).
    """
    exact = value if isinstance(value, Decimal) else Decimal(repr(float(value)))
    if not exact.is_finite():
        raise ValueError(f"a budget value must be finite, got {value!r}")
    return exact


@dataclass(frozen=True)
class StreamBudget:
    """The ledger's view of one stream's spend on one source.

    ``epsilon_spent`` is the largest epsilon of the stream's recorded epochs (its event-level
    spend: epochs hold disjoint events and compose in parallel)."""

    stream: str
    source: str
    epsilon_per_epoch: Epsilon
    epsilon_spent: Epsilon

    @property
    def next_epoch_epsilon(self) -> Decimal:
        """Event-level epsilon the stream's next epoch adds to its source (exact): what the
        ledger checks against the source's headroom before recording the spend
        (:meth:`streamdp.engine.ledger.BudgetLedger.record_epoch`)."""
        return max(
            exact_epsilon(self.epsilon_per_epoch) - exact_epsilon(self.epsilon_spent), Decimal(0)
        )


@dataclass(frozen=True)
class SourceBudget:
    """The ledger's view of one input source: its cap and what its streams spent."""

    source: str
    epsilon_cap: Epsilon
    epsilon_spent: Epsilon
    # user level: the sum over every epoch (see BudgetLedger.sequential_spent)
    sequential_spent: Epsilon = 0.0

    @property
    def epsilon_headroom(self) -> Decimal:
        """Cap minus event-level spend, exact (negative only if the ledger is over its cap)."""
        return exact_epsilon(self.epsilon_cap) - exact_epsilon(self.epsilon_spent)


@dataclass(frozen=True)
class BudgetView:
    """A consistent snapshot of the durable budget ledger, as the metrics need it."""

    streams: tuple[StreamBudget, ...] = ()
    sources: tuple[SourceBudget, ...] = ()


BudgetProvider = Callable[[], BudgetView]


class _LedgerCollector(Collector):
    """Reads the budget gauges from the ledger at each scrape, so they survive restarts."""

    def __init__(self) -> None:
        self._provider: BudgetProvider = BudgetView
        self._lock = threading.Lock()

    def bind(self, provider: BudgetProvider) -> None:
        with self._lock:
            self._provider = provider

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [_gauge_family(name) for name in _BUDGET_METRICS]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            provider = self._provider
        view = provider()
        spent = _gauge_family("streamdp_epsilon_spent")
        per_epoch = _gauge_family("streamdp_stream_epsilon")
        next_epoch = _gauge_family("streamdp_stream_next_epoch_epsilon")
        for entry in view.streams:
            labels = [entry.stream, entry.source]
            spent.add_metric(labels, _finite(entry.epsilon_spent))
            per_epoch.add_metric(labels, _finite(entry.epsilon_per_epoch))
            next_epoch.add_metric(labels, _finite(entry.next_epoch_epsilon))
        source_spent = _gauge_family("streamdp_source_epsilon_spent")
        cap = _gauge_family("streamdp_source_epsilon_cap")
        sequential = _gauge_family("streamdp_source_epsilon_sequential_spent")
        headroom = _gauge_family("streamdp_source_epsilon_headroom")
        for source in view.sources:
            source_spent.add_metric([source.source], _finite(source.epsilon_spent))
            cap.add_metric([source.source], _finite(source.epsilon_cap))
            sequential.add_metric([source.source], _finite(source.sequential_spent))
            # an over-cap ledger shows as negative headroom (StreamdpSourceBudgetExceeded)
            headroom.add_metric([source.source], _finite(source.epsilon_headroom, signed=True))
        yield from (spent, per_epoch, next_epoch, source_spent, cap, sequential, headroom)


def _gauge_family(name: str) -> GaugeMetricFamily:
    entry = spec(name)
    return GaugeMetricFamily(entry.name, entry.help, labels=list(entry.labels))


def _finite(value: Epsilon, *, signed: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number) or (number < 0 and not signed):
        raise ValueError(f"a budget value must be finite and >= 0, got {value!r}")
    return number


class StreamdpMetrics:
    """All streamdp metrics, registered in one registry (a fresh one per instance by default).

    The engine calls the ``record_*``/``set_*`` methods; the budget gauges are read at every
    scrape from the provider given to :meth:`bind_ledger`. Label values are stream, source,
    counter and topic names from the configuration and the fixed :data:`REJECTION_REASONS`.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, input_volume: bool = True
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True) if registry is None else registry
        self.input_volume = input_volume
        self._ledger = _LedgerCollector()
        self.registry.register(self._ledger)
        self._gauges: dict[str, Gauge] = {}
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for entry in CATALOGUE:
            if entry.name in _BUDGET_METRICS or (entry.input_volume and not input_volume):
                continue
            if entry.kind == "gauge":
                self._gauges[entry.name] = Gauge(
                    entry.name, entry.help, entry.labels, registry=self.registry
                )
            elif entry.kind == "counter":
                self._counters[entry.name] = Counter(
                    entry.name, entry.help, entry.labels, registry=self.registry
                )
            else:
                buckets = (
                    CONSISTENCY_BUCKETS if "consistency" in entry.name else CLOSE_LATENCY_BUCKETS
                )
                self._histograms[entry.name] = Histogram(
                    entry.name, entry.help, entry.labels, registry=self.registry, buckets=buckets
                )

    # --- budget -------------------------------------------------------------------------------
    def bind_ledger(self, provider: BudgetProvider) -> None:
        """Read the budget gauges from ``provider()`` at every scrape."""
        self._ledger.bind(provider)

    # --- configuration --------------------------------------------------------------------------
    def record_build(self, version: str, sampler: str, *, secure: bool) -> None:
        """Export the build and the noise sampler (call once at start-up)."""
        self._gauges["streamdp_build"].labels(version, sampler).set(1)
        self._gauges["streamdp_noise_secure"].set(1 if secure else 0)

    def configure_stream(
        self,
        stream: str,
        *,
        horizon_periods: int,
        allowed_lateness_seconds: float,
        period_seconds: float | None = None,
    ) -> None:
        """Set the per-stream constants from the stream spec (call at start-up)."""
        self._gauges["streamdp_horizon_periods"].labels(stream).set(horizon_periods)
        self._gauges["streamdp_allowed_lateness_seconds"].labels(stream).set(
            allowed_lateness_seconds
        )
        if period_seconds is not None:
            self._gauges["streamdp_period_seconds"].labels(stream).set(period_seconds)

    # --- releases ------------------------------------------------------------------------------
    def record_release(
        self,
        stream: str,
        *,
        epoch: int,
        periods_released: int,
        period_seconds: float,
        stddev: float,
        noisy_running_totals: Mapping[str, float],
        published_at: float,
        close_latency_seconds: float | None = None,
    ) -> None:
        """Record one published period of ``stream``.

        ``noisy_running_totals`` maps counter name -> the NOISY running total just published
        (one release record each); ``stddev`` is its expected standard deviation;
        ``period_seconds`` is the length of the stream's next period (for the stall alert);
        ``published_at`` is wall-clock Unix time.
        """
        self._gauges["streamdp_epoch"].labels(stream).set(epoch)
        self._gauges["streamdp_periods_released"].labels(stream).set(periods_released)
        self._gauges["streamdp_period_seconds"].labels(stream).set(period_seconds)
        self._gauges["streamdp_release_stddev"].labels(stream).set(stddev)
        running = self._gauges["streamdp_release_cumulative"]
        for counter, value in noisy_running_totals.items():
            running.labels(stream, counter).set(value)
        self._counters["streamdp_releases_published_total"].labels(stream).inc(
            len(noisy_running_totals)
        )
        self._gauges["streamdp_last_release_timestamp_seconds"].labels(stream).set(published_at)
        if close_latency_seconds is not None:
            self._histograms["streamdp_period_close_latency_seconds"].labels(stream).observe(
                close_latency_seconds
            )

    # --- consistency ---------------------------------------------------------------------------
    def record_consistency(
        self,
        stream: str,
        *,
        residual: float,
        duration_seconds: float,
        consistent_running_totals: Mapping[str, float],
    ) -> None:
        """Record one finished consistency run (one published revision)."""
        self._counters["streamdp_consistency_runs_total"].labels(stream).inc()
        self._gauges["streamdp_consistency_residual"].labels(stream).set(residual)
        self._histograms["streamdp_consistency_duration_seconds"].labels(stream).observe(
            duration_seconds
        )
        consistent = self._gauges["streamdp_consistent_cumulative"]
        for counter, value in consistent_running_totals.items():
            consistent.labels(stream, counter).set(value)

    # --- input volume (no-ops when input_volume=False) ----------------------------------------
    def record_input(self, topic: str, records: int = 1) -> None:
        """Count ``records`` read from input ``topic``."""
        if self.input_volume:
            self._counters["streamdp_input_records_total"].labels(topic).inc(records)

    def record_rejected(self, topic: str, reason: str, records: int = 1) -> None:
        """Count input records not counted, by ``reason`` (one of :data:`REJECTION_REASONS`)."""
        if reason not in REJECTION_REASONS:
            raise ValueError(
                f"unknown rejection reason {reason!r}; use one of {sorted(REJECTION_REASONS)}"
            )
        if self.input_volume:
            self._counters["streamdp_events_rejected_total"].labels(topic, reason).inc(records)

    def set_consumer_lag(self, topic: str, records: int) -> None:
        """Set the records on ``topic`` this worker has not processed yet."""
        if self.input_volume:
            self._gauges["streamdp_consumer_lag_records"].labels(topic).set(records)

    # --- exposition ----------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The Prometheus text exposition of this registry (serve with ``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)
