"""The metrics catalogue: Prometheus naming rules, exposition round trip, ledger-backed gauges.

What this proves: every family follows the naming rules the deploy files rely on (checked on the
catalogue data, not by eye); :func:`exported_sample_names` is exactly the set of sample names a
fully populated registry exposes (so the deploy tests' "does this metric exist" check is sound);
values pass through the text exposition unchanged (parsed with prometheus_client's parser);
budget gauges are read from the ledger at scrape time (a new process reports the same spend);
``input_volume=False`` removes every input-volume series.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from streamdp.budget_view import BudgetView, SourceBudget, StreamBudget
from streamdp.metrics import StreamdpMetrics
from streamdp.metrics_catalogue import (
    CATALOGUE,
    INPUT_VOLUME_METRICS,
    REJECTION_REASONS,
    exported_sample_names,
    spec,
)

ALLOWED_LABELS = {"stream", "source", "counter", "topic", "reason", "version", "sampler"}
# Units a name may end in (base units only), and unitless gauges that name what they count.
BASE_UNIT_SUFFIXES = ("_seconds", "_records", "_periods")
UNITLESS_GAUGES = {
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
    "streamdp_periods_released",
    "streamdp_epoch",
    "streamdp_release_stddev",
    "streamdp_release_cumulative",
    "streamdp_consistent_cumulative",
    "streamdp_consistency_residual",
    "streamdp_build",
    "streamdp_noise_secure",
}
NON_BASE_UNITS = re.compile(r"_(milli|micro|nano|kilo|mega)?(ms|us|minutes|hours|days|bytes_k)")


def populated(input_volume: bool = True) -> StreamdpMetrics:
    """A registry in which every family has at least one child."""
    metrics = StreamdpMetrics(input_volume=input_volume)
    metrics.bind_ledger(
        lambda: BudgetView(
            streams=(
                StreamBudget("orders", "orders", 1.0, 0.25),
                StreamBudget("orders_hourly", "orders", 0.5, 0.5),
                StreamBudget("census", "people", 0.5, 0.5, "rho", 7.29),
            ),
            sources=(
                SourceBudget("orders", 2.0, 0.75),
                SourceBudget("people", 1.0, 0.5, 0.5, "rho"),
            ),
        )
    )
    metrics.configure_stream(
        "orders",
        horizon_periods=4095,
        allowed_lateness_seconds=3600.0,
        period_seconds=86400.0,
    )
    metrics.record_build("0.1.0", "opendp-discrete-laplace", secure=True)
    metrics.record_release(
        "orders",
        epoch=2,
        periods_released=7,
        period_seconds=86400.0,
        stddev=12.5,
        noisy_running_totals={"burger": 101.0, "fries": -3.0, "cola": 44.0},
        published_at=1_700_000_000.0,
        close_latency_seconds=0.7,
    )
    metrics.record_consistency(
        "orders",
        residual=2.5e-10,
        duration_seconds=0.02,
        consistent_running_totals={"burger": 99.5, "fries": 0.5, "cola": 44.0},
    )
    metrics.record_input("orders", 10)
    metrics.record_rejected("orders", "late", 2)
    metrics.record_unit_drops("orders", 3)
    metrics.set_consumer_lag("orders", 17)
    return metrics


def samples(metrics: StreamdpMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    table: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return table[(name, frozenset(labels.items()))]


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: e.name)
def test_names_follow_prometheus_conventions(entry: object) -> None:
    from streamdp.metrics_catalogue import MetricSpec

    assert isinstance(entry, MetricSpec)
    name = entry.name
    assert re.fullmatch(r"streamdp_[a-z][a-z0-9_]*[a-z0-9]", name), name
    assert name.count("streamdp_") == 1
    assert "__" not in name
    if entry.kind == "counter":
        assert name.endswith("_total")
    else:
        assert not name.endswith("_total"), name
    for reserved in ("_bucket", "_count", "_sum", "_created", "_info"):
        assert not name.endswith(reserved), name
    assert not NON_BASE_UNITS.search(name), name
    if entry.kind == "histogram" or name not in UNITLESS_GAUGES | {
        "streamdp_releases_published_total",
        "streamdp_consistency_runs_total",
        "streamdp_input_records_total",
        "streamdp_events_rejected_total",
    }:
        assert name.removesuffix("_total").endswith(BASE_UNIT_SUFFIXES), (
            f"{name} measures something with a unit but does not name it"
        )
    assert set(entry.labels) <= ALLOWED_LABELS, entry.labels
    assert len(set(entry.labels)) == len(entry.labels)
    assert entry.help.strip()


def test_catalogue_names_are_unique_and_input_volume_is_marked() -> None:
    names = [e.name for e in CATALOGUE]
    assert len(names) == len(set(names))
    assert {
        "streamdp_input_records_total",
        "streamdp_events_rejected_total",
        "streamdp_consumer_lag_records",
        "streamdp_unit_bound_dropped_records_total",
        # grows with the records received just before a close (deploy audit)
        "streamdp_period_close_latency_seconds",
        # its wall time holds GC pauses that grow with the records held (audit of 2026-11-28)
        "streamdp_consistency_duration_seconds",
    } == INPUT_VOLUME_METRICS
    with pytest.raises(KeyError):
        spec("streamdp_no_such_metric")


def test_exported_sample_names_match_a_populated_exposition() -> None:
    exposed = {name for name, _ in samples(populated())}
    assert exposed == exported_sample_names()
    assert not any(n.endswith("_created") for n in exposed)


def test_exposition_round_trips_values_and_label_sets() -> None:
    table = samples(populated())
    assert value(table, "streamdp_epsilon_spent", stream="orders", source="orders") == 0.25
    assert value(table, "streamdp_stream_epsilon", stream="orders_hourly", source="orders") == 0.5
    assert value(table, "streamdp_source_epsilon_spent", source="orders") == 0.75
    assert value(table, "streamdp_source_epsilon_cap", source="orders") == 2.0
    assert value(table, "streamdp_horizon_periods", stream="orders") == 4095
    assert value(table, "streamdp_periods_released", stream="orders") == 7
    assert value(table, "streamdp_epoch", stream="orders") == 2
    # one release record per counter
    assert value(table, "streamdp_releases_published_total", stream="orders") == 3
    assert value(table, "streamdp_release_cumulative", stream="orders", counter="fries") == -3
    assert value(table, "streamdp_consistent_cumulative", stream="orders", counter="burger") == 99.5
    assert (
        value(table, "streamdp_last_release_timestamp_seconds", stream="orders") == 1_700_000_000.0
    )
    assert value(table, "streamdp_consistency_residual", stream="orders") == 2.5e-10
    assert value(table, "streamdp_source_epsilon_headroom", source="orders") == 1.25
    # "orders" spent 0.25 of its 1.0 per epoch: its next epoch adds 0.75; orders_hourly 0
    assert (
        value(table, "streamdp_stream_next_epoch_epsilon", stream="orders", source="orders") == 0.75
    )
    assert (
        value(table, "streamdp_stream_next_epoch_epsilon", stream="orders_hourly", source="orders")
        == 0.0
    )
    assert value(table, "streamdp_consistency_duration_seconds_count", stream="orders") == 1
    assert (
        value(table, "streamdp_period_close_latency_seconds_bucket", stream="orders", le="0.5") == 0
    )
    assert (
        value(table, "streamdp_period_close_latency_seconds_bucket", stream="orders", le="1.0") == 1
    )
    assert value(table, "streamdp_events_rejected_total", topic="orders", reason="late") == 2
    assert value(table, "streamdp_consumer_lag_records", topic="orders") == 17
    # every label set uses only the catalogue's labels (plus le on buckets)
    for name, labels in table:
        family = next(e for e in CATALOGUE if name.startswith(e.name.removesuffix("_total")))
        extra = {"le"} if name.endswith("_bucket") else set()
        assert {k for k, _ in labels} == set(family.labels) | extra, name


def test_budget_gauges_are_read_from_the_ledger_at_every_scrape() -> None:
    ledger = {"spent": 0.5}

    def view() -> BudgetView:
        return BudgetView(
            streams=(StreamBudget("adm", "admissions", 1.0, ledger["spent"]),),
            sources=(SourceBudget("admissions", 1.0, ledger["spent"]),),
        )

    first = StreamdpMetrics()
    first.bind_ledger(view)
    assert value(samples(first), "streamdp_epsilon_spent", stream="adm", source="admissions") == 0.5
    ledger["spent"] = 1.0
    assert value(samples(first), "streamdp_source_epsilon_spent", source="admissions") == 1.0
    # a restarted worker (new instance, new registry) bound to the same ledger reports the same
    restarted = StreamdpMetrics()
    restarted.bind_ledger(view)
    assert (
        value(samples(restarted), "streamdp_epsilon_spent", stream="adm", source="admissions")
        == 1.0
    )


def test_headroom_and_next_epoch_spend_are_exact_decimals() -> None:
    """0.3 - 0.2 is 0.09999999999999998 in floats: a stream needing 0.1 would look refused.
    The gauges are computed in decimals, so a spend that fits the cap exactly shows as fitting,
    and the worker's Decimal ledger values pass through unchanged."""
    metrics = StreamdpMetrics()
    metrics.bind_ledger(
        lambda: BudgetView(
            streams=(
                StreamBudget("old", "s", Decimal("0.2"), Decimal("0.2")),
                StreamBudget("new", "s", Decimal("0.1"), Decimal("0")),
            ),
            sources=(SourceBudget("s", 0.3, 0.2),),
        )
    )
    table = samples(metrics)
    headroom = value(table, "streamdp_source_epsilon_headroom", source="s")
    needed = value(table, "streamdp_stream_next_epoch_epsilon", stream="new", source="s")
    assert (headroom, needed) == (0.1, 0.1)
    assert not needed > headroom  # the alert's comparison: this spend is accepted
    assert 0.3 - 0.2 < 0.1  # what a float subtraction would have said


def test_a_zcdp_stream_and_source_show_in_the_rho_families_only() -> None:
    table = samples(populated())
    assert value(table, "streamdp_rho_spent", stream="census", source="people") == 0.5
    assert value(table, "streamdp_stream_zcdp_epsilon", stream="census", source="people") == 7.29
    assert value(table, "streamdp_source_rho_cap", source="people") == 1.0
    assert value(table, "streamdp_source_rho_headroom", source="people") == 0.5
    labelled = {labels for (name, labels) in table if name.startswith("streamdp_source_epsilon")}
    assert frozenset({("source", "people")}) not in labelled  # never mixed into epsilon
    assert frozenset({("source", "orders")}) in labelled


def test_over_cap_ledger_shows_negative_headroom() -> None:
    metrics = StreamdpMetrics()
    metrics.bind_ledger(lambda: BudgetView(sources=(SourceBudget("s", 1.0, 1.5),)))
    assert value(samples(metrics), "streamdp_source_epsilon_headroom", source="s") == -0.5


def test_unbound_ledger_exports_no_budget_series_and_bad_values_are_refused() -> None:
    metrics = StreamdpMetrics()
    assert not any(name.startswith("streamdp_epsilon") for name, _ in samples(metrics))
    metrics.bind_ledger(lambda: BudgetView(sources=(SourceBudget("s", float("nan"), 0.0),)))
    with pytest.raises(ValueError, match="nan"):
        metrics.exposition()


def test_input_volume_off_removes_every_input_volume_series() -> None:
    metrics = populated(input_volume=False)
    exposed = {name for name, _ in samples(metrics)}
    assert not any(
        n.startswith(tuple(m.removesuffix("_total") for m in INPUT_VOLUME_METRICS)) for n in exposed
    )
    assert "streamdp_epsilon_spent" in exposed
    assert exposed == exported_sample_names() - {
        n
        for n in exported_sample_names()
        if n.startswith(tuple(m.removesuffix("_total") for m in INPUT_VOLUME_METRICS))
    }


def test_unknown_rejection_reason_is_refused_and_registries_are_independent() -> None:
    metrics = StreamdpMetrics()
    with pytest.raises(ValueError, match="unknown rejection reason"):
        metrics.record_rejected("orders", "period_17")
    assert "duplicate_event" in REJECTION_REASONS
    # two instances never collide (fresh registry each), an explicit registry is honoured
    registry = CollectorRegistry()
    StreamdpMetrics(registry)
    StreamdpMetrics()
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        StreamdpMetrics(registry)


@pytest.mark.parametrize(
    ("retired", "per_epoch", "recorded", "refused"),
    [
        (Decimal("0.6"), Decimal("0.5"), None, True),  # new stream, retired spend on the ledger
        (Decimal("0.5"), Decimal("0.5"), None, False),  # new stream fits exactly
        (Decimal("0"), Decimal("1"), Decimal("1"), False),  # rolls at the cap (the demo)
        (Decimal("0.25"), Decimal("1"), Decimal("0.5"), True),  # raised epsilon past the cap
    ],
)
def test_next_epoch_gauge_over_headroom_is_exactly_the_ledgers_refusal(
    retired: Decimal, per_epoch: Decimal, recorded: Decimal | None, refused: bool
) -> None:
    """The alert StreamdpStreamNextSpendRefused compares these two gauges; the ledger decides.
    Both must agree, including at spent == cap, where a roll is accepted."""
    from streamdp.engine.ledger import BudgetLedger
    from streamdp.errors import BudgetError

    ledger = BudgetLedger({"s": Decimal(1)})
    if retired:
        ledger.record_epoch("s", "retired", 0, retired)
    if recorded is not None:
        ledger.record_epoch("s", "live", 0, recorded)
    stream = StreamBudget("live", "s", per_epoch, recorded or Decimal(0))
    source = SourceBudget("s", Decimal(1), ledger.spent("s"))
    metrics = StreamdpMetrics()
    metrics.bind_ledger(lambda: BudgetView(streams=(stream,), sources=(source,)))
    table = samples(metrics)
    alert = value(table, "streamdp_stream_next_epoch_epsilon", stream="live", source="s") > value(
        table, "streamdp_source_epsilon_headroom", source="s"
    )
    assert alert is refused
    next_epoch = 0 if recorded is None else 1
    if refused:
        with pytest.raises(BudgetError):
            ledger.record_epoch("s", "live", next_epoch, per_epoch)
    else:
        assert ledger.record_epoch("s", "live", next_epoch, per_epoch)


def test_a_streams_releases_leave_the_worker_its_source_moved_away_from() -> None:
    """After a rebalance the old owner must not keep exporting a stream's last releases
    (alerts take max by stream over workers: the frozen copy would win, deploy audit). Its
    configuration gauges stay; other streams' series are untouched."""
    metrics = StreamdpMetrics()
    for stream in ("moved", "kept"):
        metrics.configure_stream(stream, horizon_periods=366, allowed_lateness_seconds=60.0)
        metrics.record_release(
            stream,
            epoch=0,
            periods_released=365,
            period_seconds=86400.0,
            stddev=3.0,
            noisy_running_totals={"a": 1.0, "b": 2.0},
            published_at=1.0,
        )
        metrics.record_consistency(
            stream, residual=0.0, duration_seconds=0.1, consistent_running_totals={"a": 1.5}
        )
    metrics.forget_releases(["moved"])
    table = samples(metrics)
    moved = {name for name, labels in table if ("stream", "moved") in labels}
    kept = {name for name, labels in table if ("stream", "kept") in labels}
    assert "streamdp_periods_released" in kept
    assert "streamdp_periods_released" not in moved
    assert "streamdp_release_cumulative" not in moved
    assert "streamdp_consistent_cumulative" not in moved
    assert "streamdp_last_release_timestamp_seconds" not in moved
    assert {"streamdp_horizon_periods", "streamdp_allowed_lateness_seconds"} <= moved
    stale_gauges = {
        name
        for name in moved
        if name.startswith("streamdp_")
        and not name.endswith(("_total", "_bucket", "_count", "_sum", "_created"))
    }
    assert stale_gauges <= {"streamdp_horizon_periods", "streamdp_allowed_lateness_seconds",
                            "streamdp_period_seconds"}  # fmt: skip


def test_input_volume_counters_start_at_zero_for_every_topic_reason_and_unit_stream() -> None:
    """``increase()`` over a series first exported at its first increment misses that
    increment (no earlier sample): every input-volume counter series the worker may count is
    exported at 0 from the start, and none of them when input-volume metrics are off."""
    metrics = StreamdpMetrics(input_volume=True)
    metrics.configure_input(["orders", "streamdp.control"], ["patients"])
    table = samples(metrics)
    for topic in ("orders", "streamdp.control"):
        assert value(table, "streamdp_input_records_total", topic=topic) == 0
        for reason in REJECTION_REASONS:
            assert value(table, "streamdp_events_rejected_total", topic=topic, reason=reason) == 0
    assert value(table, "streamdp_unit_bound_dropped_records_total", stream="patients") == 0
    metrics.record_rejected("orders", "wrong_partition_key", 3)
    table = samples(metrics)
    assert (
        value(table, "streamdp_events_rejected_total", topic="orders", reason="wrong_partition_key")
        == 3
    )
    off = StreamdpMetrics(input_volume=False)
    off.configure_input(["orders"], ["patients"])
    assert "rejected" not in off.exposition().decode()
