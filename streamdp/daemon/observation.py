"""What the worker tells ``/metrics`` about a committed batch and about its input.

:class:`OutcomeObserver` turns a committed :class:`~streamdp.daemon.service.BatchOutcome` into
release, consistency and dead-letter metrics (noisy values only, plus the engine's own revision
statistics); :class:`InputProgress` keeps, per input partition, the next offset to process, the
consumer lag and the stall watchdog's progress marks, and reports input volume and lag (operator
surfaces protected like the input topic, see ``streamdp.metrics``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from faust.exceptions import NotReady
from faust.types import TP

from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.stall_watch import InputStallWatch
from streamdp.engine import EngineSpec
from streamdp.engine.periods import PeriodClock
from streamdp.engine.spec import StreamSpec
from streamdp.metrics import StreamdpMetrics

__all__ = ["MAX_COUNTER_SERIES", "InputProgress", "OutcomeObserver", "period_seconds_at_start"]

#: Most counters of one stream exported as per-counter gauges (``streamdp_release_cumulative``,
#: ``streamdp_consistent_cumulative``): the first ones in declared order (a places stream's
#: nation and upper levels come first). A county stream has 6,388 counters and a national one
#: up to millions: one Prometheus series each would swamp the server and the scrape.
MAX_COUNTER_SERIES = 256


def period_seconds_at_start(stream_spec: StreamSpec, now: float) -> float:
    """``streamdp_period_seconds`` of a stream before its first release after the worker
    starts: its first period's length, or +Inf for a stream that stops at its horizon
    (``on_epoch_end = "stop"``) whose last close instant is at or before public instant ``now``:
    it will never release again, and the stall alerts compare the time without a release with
    this length."""
    clock = PeriodClock(stream_spec.period)
    if stream_spec.on_epoch_end == "stop":
        last_close = clock.bounds(stream_spec.horizon - 1)[1] + stream_spec.allowed_lateness_seconds
        if last_close <= now:
            return math.inf
    start, end = clock.bounds(0)
    return end - start


class OutcomeObserver:
    """Records a committed batch's releases, revisions and rejections in the metrics, from
    the outcome alone (the periods closed and the revision statistics travel in it: nothing
    reaches back into the service or its engines)."""

    def __init__(self, metrics: StreamdpMetrics, spec: EngineSpec) -> None:
        self._metrics = metrics
        self._spec = spec
        self._series: dict[str, frozenset[str]] = {}

    def __call__(self, outcome: BatchOutcome) -> None:
        """Observe ``outcome`` once its publications are acknowledged (a tick's releases: their
        close latency runs from the tick's public instant to now)."""
        metrics = self._metrics
        spec = self._spec
        now = time.time()
        for letter in outcome.dead_letters:
            metrics.record_rejected(letter.topic or "-", letter.reason)
        for stream, dropped in outcome.unit_drops.items():
            metrics.record_unit_drops(stream, dropped)
        by_stream: dict[str, dict[str, float]] = {}
        published: dict[str, int] = {}
        last: dict[str, Any] = {}
        # the largest running-total std of the stream's latest period (counters differ: per
        # level or group budgets, projections at publication)
        widest: dict[str, float] = {}
        for release in outcome.releases:
            totals = by_stream.setdefault(release.stream, {})
            if release.counter_index < MAX_COUNTER_SERIES:
                totals[release.counter] = float(release.noisy_total)
            published[release.stream] = published.get(release.stream, 0) + 1
            before = last.get(release.stream)
            if before is None or (before.epoch, before.period) != (release.epoch, release.period):
                widest[release.stream] = release.total_std
            else:
                widest[release.stream] = max(widest[release.stream], release.total_std)
            last[release.stream] = release
        for stream, totals in by_stream.items():
            release = last[stream]
            stream_spec = spec.streams[stream]
            clock = PeriodClock(stream_spec.period)
            start, end = clock.bounds(outcome.periods_closed.get(stream, 0))
            period_seconds = end - start
            if stream_spec.on_epoch_end == "stop" and release.period >= stream_spec.horizon:
                # its last period is out and none follows: no release can be overdue (the
                # stall alert compares the time since the last one with this length)
                period_seconds = math.inf
            metrics.record_release(
                stream,
                epoch=release.epoch,
                periods_released=release.period,
                period_seconds=period_seconds,
                stddev=widest[stream],
                noisy_running_totals=totals,
                releases=published[stream],
                # the tick's public instant, never the moment it ran (which a batch in front
                # of it could delay)
                published_at=now if outcome.released_at is None else outcome.released_at,
                # from that instant to the broker's acknowledgement of the release
                close_latency_seconds=(
                    None if outcome.released_at is None else max(0.0, now - outcome.released_at)
                ),
            )
        # per stream, the newest revised period's totals (of every part of it), first counters
        newest: dict[str, tuple[tuple[int, int, int], dict[str, float]]] = {}
        for revision in outcome.revisions:
            at = (revision.revision, revision.epoch, revision.period)
            held = newest.get(revision.stream)
            if held is None or held[0] < at:
                held = newest[revision.stream] = (at, {})
            if held[0] == at:
                shown = self._shown(revision.stream)
                held[1].update(
                    (name, float(value)) for name, value in revision.totals.items() if name in shown
                )
        for stream, (_, consistent) in newest.items():
            stats = outcome.revision_stats.get(stream)
            metrics.record_consistency(
                stream,
                residual=stats.residual if stats else 0.0,
                duration_seconds=stats.seconds if stats else 0.0,
                consistent_running_totals=consistent,
            )

    def _shown(self, stream: str) -> frozenset[str]:
        """The counters of ``stream`` exported one series each (:data:`MAX_COUNTER_SERIES`)."""
        held = self._series.get(stream)
        if held is None:
            names = self._spec.streams[stream].counters.names[:MAX_COUNTER_SERIES]
            held = self._series[stream] = frozenset(names)
        return held


class InputProgress:
    """Per input partition: the next offset to process, the consumer lag, the stall marks."""

    def __init__(self, metrics: StreamdpMetrics, stall_watch: InputStallWatch) -> None:
        self._metrics = metrics
        self.stall_watch = stall_watch
        self.lag: dict[tuple[str, int], int] = {}
        # next input offset to process, per partition
        self.next_offset: dict[tuple[str, int], int] = {}

    def observe(
        self,
        ends: dict[tuple[str, int], tuple[int, int]],
        highwater: Callable[[TP], Any],
    ) -> None:
        """Record a processed batch: ``ends`` maps (topic, partition) to (last offset, records)
        (``batch_input.last_offsets``); ``highwater`` is the consumer's end offset of a
        partition, for the lag."""
        per_topic: dict[str, int] = {}
        lag = self.lag
        for key, (last, count) in ends.items():
            topic = key[0]
            per_topic[topic] = per_topic.get(topic, 0) + count
            self.next_offset[key] = max(self.next_offset.get(key, 0), last + 1)
            self.stall_watch.progressed(key)
            try:
                lag[key] = max(0, int(highwater(TP(*key))) - last - 1)
            except (KeyError, TypeError, AttributeError, AssertionError, NotReady):
                # AssertionError: aiokafka's answer for a partition revoked meanwhile (a
                # rebalance while the batch was written); its lag is its next owner's to report
                continue
        for topic, count in per_topic.items():
            self._metrics.record_input(topic, count)
            self._metrics.set_consumer_lag(topic, sum(v for (t, _), v in lag.items() if t == topic))

    def revoked(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions that left this worker: their lag is their next owner's to report (kept
        here, a moved partition counted twice in ``sum by (topic)``)."""
        topics = set()
        for key in partitions:
            if self.lag.pop(key, None) is not None:
                topics.add(key[0])
        for topic in topics:
            lag = sum(v for (t, _), v in self.lag.items() if t == topic)
            self._metrics.set_consumer_lag(topic, lag)
