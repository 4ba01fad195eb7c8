"""Prometheus stays usable for wide streams: the per-counter gauges of a places stream cover
its first :data:`~streamdp.daemon.observation.MAX_COUNTER_SERIES` counters (the nation and the
states of the county example, 6,388 counters in all), while the release count still counts
every release and the values exported are exactly the published ones."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from streamdp.daemon.observation import MAX_COUNTER_SERIES, OutcomeObserver
from streamdp.daemon.outcome import BatchOutcome
from streamdp.engine import Engine
from streamdp.engine.periods import parse_instant
from streamdp.engine.records import ConsistentRecord, ReleaseRecord
from streamdp.metrics import StreamdpMetrics
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant

STREAM = "admissions-by-county"


def test_a_county_stream_exports_its_first_counters_and_counts_every_release() -> None:
    spec = example_spec("county-admissions")
    width = spec.streams[STREAM].counters.width
    assert width > MAX_COUNTER_SERIES
    engine = Engine(spec, sampler=InsecureSeededSampler(3), record_outputs=True)
    for line in generate("county-admissions", 7, 80.0, seed=2):
        engine.ingest(line.text)
    engine.advance_clock(parse_instant(release_instant(spec, 7)))
    outputs = engine.take_changes().outputs
    releases = [r for r in outputs if isinstance(r, ReleaseRecord)]
    revisions = [r for r in outputs if isinstance(r, ConsistentRecord)]
    assert len(releases) == 7 * width
    assert len({r.part for r in revisions}) > 1  # the week's revision comes in parts
    metrics = StreamdpMetrics()
    OutcomeObserver(metrics, spec)(
        BatchOutcome(releases=releases, revisions=revisions, periods_closed={STREAM: 7})
    )
    samples = [
        sample
        for family in text_string_to_metric_families(metrics.exposition().decode("utf-8"))
        for sample in family.samples
    ]
    released = {
        s.labels["counter"]: s.value for s in samples if s.name == "streamdp_release_cumulative"
    }
    first = spec.streams[STREAM].counters.names[:MAX_COUNTER_SERIES]
    latest = {r.counter: r.noisy_total for r in releases if r.period == 7}
    assert released == {name: float(latest[name]) for name in first}
    consistent = {
        s.labels["counter"]: s.value for s in samples if s.name == "streamdp_consistent_cumulative"
    }
    newest = {name: value for r in revisions if r.period == 7 for name, value in r.totals.items()}
    assert consistent == {name: newest[name] for name in first}
    (count,) = [s.value for s in samples if s.name == "streamdp_releases_published_total"]
    assert count == 7 * width


def test_a_narrow_stream_still_exports_every_counter() -> None:
    spec = example_spec("restaurant")
    (stream,) = spec.streams
    engine = Engine(spec, sampler=InsecureSeededSampler(3), record_outputs=True)
    for line in generate("restaurant", 3, 20.0, seed=2):
        engine.ingest(line.text)
    engine.advance_clock(parse_instant(release_instant(spec, 3)))
    releases = [r for r in engine.take_changes().outputs if isinstance(r, ReleaseRecord)]
    metrics = StreamdpMetrics()
    OutcomeObserver(metrics, spec)(BatchOutcome(releases=releases))
    exported = {
        sample.labels["counter"]
        for family in text_string_to_metric_families(metrics.exposition().decode("utf-8"))
        for sample in family.samples
        if sample.name == "streamdp_release_cumulative"
    }
    assert exported == set(spec.streams[stream].counters.names)


def test_the_stddev_gauge_is_the_widest_counters_of_the_latest_period() -> None:
    """A places stream whose levels have their own budgets (the nation's share small): its
    counters' stds differ, and the gauge reports the largest of the latest period's."""
    from tests.places_fixture import small_county_spec

    spec = small_county_spec(level_weights=(1, 2, 5))
    stream = next(iter(spec.streams))
    engine = Engine(spec, sampler=InsecureSeededSampler(3), record_outputs=True)
    engine.advance_clock(parse_instant(release_instant(spec, 3)))
    releases = [r for r in engine.take_changes().outputs if isinstance(r, ReleaseRecord)]
    latest = [r.total_std for r in releases if r.period == 3]
    assert min(latest) < max(latest)
    metrics = StreamdpMetrics()
    OutcomeObserver(metrics, spec)(
        BatchOutcome(releases=releases, revisions=[], periods_closed={stream: 3})
    )
    (gauge,) = [
        sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode("utf-8"))
        for sample in family.samples
        if sample.name == "streamdp_release_stddev"
    ]
    assert gauge == max(latest)
    assert gauge != releases[-1].total_std  # the last counter (a county) is not the widest


def test_a_stream_stopped_at_its_horizon_has_no_next_period_to_be_late_for() -> None:
    """A stream with ``on_epoch_end = "stop"`` releases nothing after its N-th period, by
    design: its ``streamdp_period_seconds`` (what StreamdpReleasesStalled adds to the allowed
    lateness) becomes +Inf with that last release, so the alert does not fire for ever on a
    finished stream; a rolling stream keeps its next period's length."""
    import dataclasses
    import math

    base = example_spec("restaurant")
    (name,) = base.streams
    for on_epoch_end, expected in (("stop", [86400.0, 86400.0, math.inf]), ("roll", [86400.0] * 3)):
        stream = dataclasses.replace(base.streams[name], horizon=3, on_epoch_end=on_epoch_end)
        spec = dataclasses.replace(base, streams={name: stream})
        engine = Engine(spec, sampler=InsecureSeededSampler(3), record_outputs=True)
        for line in generate("restaurant", 3, 20.0, seed=2):
            engine.ingest(line.text)
        metrics = StreamdpMetrics()
        observer = OutcomeObserver(metrics, spec)
        seen = []
        for period in (1, 2, 3):
            engine.advance_clock(parse_instant(release_instant(spec, period)))
            releases = [r for r in engine.take_changes().outputs if isinstance(r, ReleaseRecord)]
            assert {r.period for r in releases} == {period}
            observer(BatchOutcome(releases=releases, periods_closed={name: period}))
            (value,) = [
                s.value
                for family in text_string_to_metric_families(metrics.exposition().decode())
                for s in family.samples
                if s.name == "streamdp_period_seconds"
            ]
            seen.append(value)
        assert seen == expected, on_epoch_end
