"""The streamdp metric catalogue: every metric family's name, type, labels and help text.

The metric *names, types and labels* defined here are a contract: the Prometheus alert rules,
the Grafana dashboard and the operator guide in ``deploy/`` and ``docs/`` use them, and the
deploy tests check that every query names only metrics listed in :data:`CATALOGUE`.

Naming rules (checked by ``tests/test_metrics.py``): one ``streamdp_`` prefix, base units
(seconds, records, epsilon is dimensionless), ``_total`` on counters only, ``_seconds`` /
``_records`` suffixes naming the unit, and labels drawn only from small sets fixed by the
configuration (``stream``, ``source``, ``counter``, ``topic``) or by the code (``reason``,
and the build's ``version`` and ``sampler``).
Never a period index, an event id, or anything else derived from the data.

The families that reveal input volume are marked (:data:`INPUT_VOLUME_METRICS`); the registry
that exports the catalogue is :class:`streamdp.metrics.StreamdpMetrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streamdp.engine.events import REASONS

PREFIX = "streamdp_"

MetricKind = Literal["gauge", "counter", "histogram"]

#: Reasons an input record is not counted: the engine's fixed set (every one sends the record
#: to ``streamdp.dead-letter``). Re-deliveries after a crash are skipped, not rejected.
REJECTION_REASONS: frozenset[str] = frozenset(REASONS)


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
        "Epsilon the durable ledger records as spent by this stream on this input source: the "
        "largest of its recorded epochs' (epochs hold disjoint events; pure epsilon-DP, event "
        "level).",
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
        "Epsilon summed over every epoch of every stream of this source: the loss of one "
        "event in every epoch, or, for streams with a privacy unit, of one unit over the "
        "epochs (grows as epochs roll; the per-epoch spend is streamdp_source_epsilon_spent).",
    ),
    MetricSpec(
        "streamdp_source_epsilon_headroom",
        "gauge",
        ("source",),
        "Epsilon cap minus event-level spend of this input source (exact decimal arithmetic): "
        "how much more epsilon per epoch the ledger would still accept on it. 0 is normal when "
        "the configured streams commit the whole cap by design. Per epoch: the cap does not "
        "bound a privacy unit's loss over epochs (streamdp_source_epsilon_sequential_spent).",
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
    # --- the same for zCDP streams and sources (issue 27): amounts in rho --------------------
    MetricSpec(
        "streamdp_rho_spent",
        "gauge",
        ("stream", "source"),
        "Rho the durable ledger records as spent by this zCDP stream on this input source: the "
        "largest of its recorded epochs' (event level).",
    ),
    MetricSpec(
        "streamdp_stream_rho",
        "gauge",
        ("stream", "source"),
        "Rho the zCDP stream is configured to spend per epoch.",
    ),
    MetricSpec(
        "streamdp_stream_zcdp_epsilon",
        "gauge",
        ("stream", "source"),
        "The (epsilon, delta)-DP bound of the zCDP stream's rho per epoch, epsilon = rho + "
        "2 sqrt(rho ln(1/delta)) rounded up, at the delta its spec states (/status shows it).",
    ),
    MetricSpec(
        "streamdp_source_rho_spent",
        "gauge",
        ("source",),
        "Rho spent on this zCDP input source by all streams reading it (they compose: sum).",
    ),
    MetricSpec(
        "streamdp_source_rho_cap",
        "gauge",
        ("source",),
        "Rho cap the configuration declares for this zCDP input source.",
    ),
    MetricSpec(
        "streamdp_source_rho_sequential_spent",
        "gauge",
        ("source",),
        "Rho summed over every epoch of every stream of this zCDP source: one event in every "
        "epoch, or one privacy unit over the epochs (the per-epoch spend is "
        "streamdp_source_rho_spent).",
    ),
    MetricSpec(
        "streamdp_source_rho_headroom",
        "gauge",
        ("source",),
        "Rho cap minus event-level spend of this zCDP input source (exact decimal arithmetic), "
        "per epoch: the cap does not bound a privacy unit's loss over epochs "
        "(streamdp_source_rho_sequential_spent).",
    ),
    MetricSpec(
        "streamdp_stream_next_epoch_rho",
        "gauge",
        ("stream", "source"),
        "Event-level rho the zCDP stream's next ledger spend adds to its source (as "
        "streamdp_stream_next_epoch_epsilon for pure streams).",
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
        "Length in seconds of the stream's period after its latest release, the next one due "
        "(calendar periods vary); +Inf once "
        "a stream that stops at its horizon (on_epoch_end = 'stop') has released its last "
        "period.",
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
        "Public instant (Unix seconds) of the stream's latest period release: the scheduled "
        "instant of the tick that made it, also its records' Kafka timestamp.",
    ),
    MetricSpec(
        "streamdp_build",
        "gauge",
        ("version", "sampler"),
        "Always 1: the worker's streamdp version and the name of the noise sampler its releases "
        "are drawn with (labels fixed by the code).",
    ),
    MetricSpec(
        "streamdp_worker_start_time_seconds",
        "gauge",
        (),
        "Unix time at which this worker process started: a restart changes it (a worker "
        "restarting in a loop, e.g. on exit status 75, can stay up between scrapes).",
    ),
    MetricSpec(
        "streamdp_noise_secure",
        "gauge",
        (),
        "1 when releases use the production sampler (OpenDP's exact discrete Laplace, and its "
        "discrete Gaussian for zCDP streams), 0 for "
        "the INSECURE seeded sampler of tests and demos, whose releases are not private.",
    ),
    MetricSpec(
        "streamdp_release_stddev",
        "gauge",
        ("stream",),
        "Expected standard deviation of the latest noisy running totals (exact variance of the "
        "discrete noise): the largest over the stream's counters (they differ when levels or "
        "attribute groups have their own budgets, or noise is projected at publication).",
    ),
    MetricSpec(
        "streamdp_release_cumulative",
        "gauge",
        ("stream", "counter"),
        "Latest NOISY running total released for the counter (already public on "
        "streamdp.releases; never a raw count); a stream's first 256 counters only.",
    ),
    MetricSpec(
        "streamdp_consistent_cumulative",
        "gauge",
        ("stream", "counter"),
        "Running total of the latest period in the latest consistent revision (post-processing "
        "of noisy releases; already public on streamdp.consistent); a stream's first 256 "
        "counters only.",
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
    # --- input volume: reveals record counts like topic offsets do (optional) -------------------
    MetricSpec(
        "streamdp_consistency_duration_seconds",
        "histogram",
        ("stream",),
        "Wall time of consistency runs. The solve reads noisy values only, but its wall time "
        "also holds the garbage collector's pauses, which grow with the records the worker "
        "holds: an input-volume metric.",
        input_volume=True,
    ),
    MetricSpec(
        "streamdp_period_close_latency_seconds",
        "histogram",
        ("stream",),
        "Wall time from the public instant of the tick that closed a period (its end plus "
        "lateness, or the heartbeat after an operator's close) to the broker's acknowledgement "
        "of its releases. Grows with the records received just before the close (the tick "
        "processes them first): an input-volume metric.",
        input_volume=True,
    ),
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
        "streamdp_unit_bound_dropped_records_total",
        "counter",
        ("stream",),
        "Records a stream did not count because their privacy unit (e.g. a patient) had "
        "reached its bounds (records per period, periods per epoch); not dead letters.",
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

BUDGET_METRICS = (
    "streamdp_epsilon_spent",
    "streamdp_stream_epsilon",
    "streamdp_source_epsilon_spent",
    "streamdp_source_epsilon_cap",
    "streamdp_source_epsilon_sequential_spent",
    "streamdp_source_epsilon_headroom",
    "streamdp_stream_next_epoch_epsilon",
    "streamdp_rho_spent",
    "streamdp_stream_rho",
    "streamdp_stream_zcdp_epsilon",
    "streamdp_source_rho_spent",
    "streamdp_source_rho_cap",
    "streamdp_source_rho_sequential_spent",
    "streamdp_source_rho_headroom",
    "streamdp_stream_next_epoch_rho",
)


def spec(name: str) -> MetricSpec:
    """The catalogue entry called ``name`` (a family name as in :data:`CATALOGUE`)."""
    for entry in CATALOGUE:
        if entry.name == name:
            return entry
    raise KeyError(f"{name!r} is not a streamdp metric; see streamdp.metrics_catalogue.CATALOGUE")


def exported_sample_names() -> frozenset[str]:
    """Every sample name a streamdp ``/metrics`` page can contain.

    Histograms expand to ``_bucket``, ``_sum`` and ``_count``. No ``_created`` sample: the
    page leaves out prometheus_client's first-touch wall times (:mod:`streamdp.metrics`).
    These are the names a PromQL expression may select.
    """
    names: set[str] = set()
    for entry in CATALOGUE:
        if entry.kind in ("gauge", "counter"):
            names.add(entry.name)
        else:
            names.update(entry.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return frozenset(names)
