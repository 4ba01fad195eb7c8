"""The Prometheus registry of the streamdp worker (DESIGN.md §5, "Operations").

:class:`StreamdpMetrics` registers every family of the catalogue
(:mod:`streamdp.metrics_catalogue`, which holds the naming contract) and is what the worker
updates and serves on ``/metrics`` (:meth:`StreamdpMetrics.exposition`). The budget gauges are
not set but read from the durable ledger at every scrape (:mod:`streamdp.budget_view`), so they
survive restarts.

Privacy. Every value exported here is a function of the configuration, the clock, or already
published noisy outputs — except the *input-volume* metrics
(:data:`streamdp.metrics_catalogue.INPUT_VOLUME_METRICS`): records read, records rejected and
consumer lag reveal how many records arrived on the input topics, exactly like the topics'
offsets do, and two timings grow with them (period-close latency, consistency duration).
They are registered only when ``input_volume=True``; operators whose Prometheus sits outside
the trust zone of the input topics must turn them off (see ``docs/operating.md``). No raw count
is ever exported.

Nor is any moment but the clock's: prometheus_client gives every counter and histogram series a
``_created`` sample, the wall time at which the series was first touched. The first release
of a stream, or the first close after records arrived, touches its series when the worker got
to it, which a record arriving just before a tick delays (audit of 2026-11-28: 0.55 s later with
one more record). :meth:`StreamdpMetrics.exposition` leaves every ``_created`` sample out.

The module depends on ``prometheus_client`` only (no Faust), so the engine, the file replayer and
the tests can all use it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamdp.budget_view import BudgetProvider, BudgetView, Epsilon
from streamdp.metrics_catalogue import BUDGET_METRICS, CATALOGUE, REJECTION_REASONS, spec

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


class _LedgerCollector(Collector):
    """Reads the budget gauges from the ledger at each scrape, so they survive restarts."""

    def __init__(self) -> None:
        self._provider: BudgetProvider = BudgetView
        self._lock = threading.Lock()

    def bind(self, provider: BudgetProvider) -> None:
        with self._lock:
            self._provider = provider

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [_gauge_family(name) for name in BUDGET_METRICS]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            provider = self._provider
        view = provider()
        families = {name: _gauge_family(name) for name in BUDGET_METRICS}
        for entry in view.streams:
            unit = entry.unit  # "epsilon" (pure DP) or "rho" (zCDP): the families it feeds
            labels = [entry.stream, entry.source]
            families[f"streamdp_{unit}_spent"].add_metric(labels, _finite(entry.epsilon_spent))
            families[f"streamdp_stream_{unit}"].add_metric(labels, _finite(entry.epsilon_per_epoch))
            families[f"streamdp_stream_next_epoch_{unit}"].add_metric(
                labels, _finite(entry.next_epoch_epsilon)
            )
            if entry.zcdp_epsilon is not None:
                families["streamdp_stream_zcdp_epsilon"].add_metric(
                    labels, _finite(entry.zcdp_epsilon)
                )
        for source in view.sources:
            unit = source.unit
            label = [source.source]
            families[f"streamdp_source_{unit}_spent"].add_metric(
                label, _finite(source.epsilon_spent)
            )
            families[f"streamdp_source_{unit}_cap"].add_metric(label, _finite(source.epsilon_cap))
            families[f"streamdp_source_{unit}_sequential_spent"].add_metric(
                label, _finite(source.sequential_spent)
            )
            # an over-cap ledger shows as negative headroom (StreamdpSourceBudgetExceeded)
            families[f"streamdp_source_{unit}_headroom"].add_metric(
                label, _finite(source.epsilon_headroom, signed=True)
            )
        yield from families.values()


def _gauge_family(name: str) -> GaugeMetricFamily:
    entry = spec(name)
    return GaugeMetricFamily(entry.name, entry.help, labels=list(entry.labels))


def _finite(value: Epsilon, *, signed: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number) or (number < 0 and not signed):
        raise ValueError(f"a budget value must be finite and >= 0, got {value!r}")
    return number


#: Per-stream gauges set from the specification, which stay when a stream's source moves away.
STREAM_CONSTANTS = frozenset(
    {"streamdp_horizon_periods", "streamdp_allowed_lateness_seconds", "streamdp_period_seconds"}
)


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
        self._labels: dict[str, tuple[str, ...]] = {e.name: tuple(e.labels) for e in CATALOGUE}
        for entry in CATALOGUE:
            if entry.name in BUDGET_METRICS or (entry.input_volume and not input_volume):
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

    def record_start(self, started_at: float) -> None:
        """Export the worker process's start instant (Unix seconds; call once at start-up)."""
        self._gauges["streamdp_worker_start_time_seconds"].set(started_at)

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

    def forget_releases(self, streams: Iterable[str]) -> None:
        """Drop the release-derived series of ``streams`` (their source left this worker on a
        rebalance): their new owner exports them, and a frozen copy here would win every
        ``max by (stream)``. The configuration gauges (:data:`STREAM_CONSTANTS`) stay."""
        gone = set(streams)
        for name, gauge in self._gauges.items():
            labelnames = self._labels[name]
            if name in STREAM_CONSTANTS or "stream" not in labelnames:
                continue
            stale = {
                tuple(sample.labels[label] for label in labelnames)
                for family in gauge.collect()
                for sample in family.samples
                if sample.labels.get("stream") in gone
            }
            for labels in stale:
                gauge.remove(*labels)

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
        releases: int | None = None,
    ) -> None:
        """Record one published period of ``stream``.

        ``noisy_running_totals`` maps counter name -> the NOISY running total just published
        (one release record each; a wide stream's first counters only, see
        ``streamdp.daemon.observation.MAX_COUNTER_SERIES``); ``releases`` is how many release
        records were published (default: one per total given); ``stddev`` is the expected
        standard deviation;
        ``period_seconds`` is the length of the stream's next period (for the stall alert;
        ``math.inf`` when the stream stopped at its horizon and has no next period);
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
            len(noisy_running_totals) if releases is None else releases
        )
        self._gauges["streamdp_last_release_timestamp_seconds"].labels(stream).set(published_at)
        if close_latency_seconds is not None and self.input_volume:
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
        if self.input_volume:  # its wall time holds GC pauses that grow with the records held
            self._histograms["streamdp_consistency_duration_seconds"].labels(stream).observe(
                duration_seconds
            )
        consistent = self._gauges["streamdp_consistent_cumulative"]
        for counter, value in consistent_running_totals.items():
            consistent.labels(stream, counter).set(value)

    # --- input volume (no-ops when input_volume=False) ----------------------------------------
    def configure_input(self, topics: Iterable[str], unit_streams: Iterable[str] = ()) -> None:
        """Export, at 0, every input-volume counter series the worker may later count: records
        read per input topic, rejections per topic and reason, records dropped per stream with
        a privacy unit (call at start-up). A series first exported at its first increment has
        no earlier sample, so ``increase()`` misses that increment: an alert on a first burst
        of misrouted records stayed silent (operator audit of 2026-11-28)."""
        if not self.input_volume:
            return
        for topic in topics:
            self._counters["streamdp_input_records_total"].labels(topic)
            for reason in sorted(REJECTION_REASONS):
                self._counters["streamdp_events_rejected_total"].labels(topic, reason)
        for stream in unit_streams:
            self._counters["streamdp_unit_bound_dropped_records_total"].labels(stream)

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

    def record_unit_drops(self, stream: str, records: int) -> None:
        """Count records ``stream`` dropped beyond their privacy unit's bounds."""
        if self.input_volume:
            self._counters["streamdp_unit_bound_dropped_records_total"].labels(stream).inc(records)

    def set_consumer_lag(self, topic: str, records: int) -> None:
        """Set the records on ``topic`` this worker has not processed yet."""
        if self.input_volume:
            self._gauges["streamdp_consumer_lag_records"].labels(topic).set(records)

    # --- exposition ----------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The Prometheus text exposition of this registry (serve with ``CONTENT_TYPE_LATEST``),
        without the ``_created`` samples (the module's "Privacy")."""
        return generate_latest(_WithoutCreated(self.registry))


class _WithoutCreated:
    """A view of ``registry`` whose metrics carry every sample but the ``_created`` ones (the
    wall time a series was first touched; per view, not prometheus_client's process-wide
    switch, which another library in the process could turn back on)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            kept.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield kept
