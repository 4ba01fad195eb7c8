"""What the worker tells ``/metrics`` about a committed batch and about its input.

:class:`OutcomeObserver` turns a committed :class:`~streamdp.daemon.service.BatchOutcome` into
release, consistency and dead-letter metrics (noisy values only, plus the engine's own revision
statistics); :class:`InputProgress` keeps, per input partition, the next offset to process, the
consumer lag and the stall watchdog's progress marks, and reports input volume and lag (operator
surfaces protected like the input topic, see ``streamdp.metrics``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faust.exceptions import NotReady
from faust.types import TP

from streamdp.daemon.batch_input import InputStallWatch
from streamdp.daemon.outcome import BatchOutcome
from streamdp.engine import EngineSpec
from streamdp.engine.periods import PeriodClock
from streamdp.metrics import StreamdpMetrics

__all__ = ["InputProgress", "OutcomeObserver"]


class OutcomeObserver:
    """Records a committed batch's releases, revisions and rejections in the metrics, from
    the outcome alone (the periods closed and the revision statistics travel in it: nothing
    reaches back into the service or its engines)."""

    def __init__(self, metrics: StreamdpMetrics, spec: EngineSpec) -> None:
        self._metrics = metrics
        self._spec = spec

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
        last: dict[str, Any] = {}
        for release in outcome.releases:
            by_stream.setdefault(release.stream, {})[release.counter] = float(release.noisy_total)
            last[release.stream] = release
        for stream, totals in by_stream.items():
            release = last[stream]
            clock = PeriodClock(spec.streams[stream].period)
            start, end = clock.bounds(outcome.periods_closed.get(stream, 0))
            metrics.record_release(
                stream,
                epoch=release.epoch,
                periods_released=release.period,
                period_seconds=end - start,
                stddev=release.total_std,
                noisy_running_totals=totals,
                # the tick's public instant, never the moment it ran (which a batch in front
                # of it could delay)
                published_at=now if outcome.released_at is None else outcome.released_at,
                # from that instant to the broker's acknowledgement of the release
                close_latency_seconds=(
                    None if outcome.released_at is None else max(0.0, now - outcome.released_at)
                ),
            )
        latest_revision: dict[str, Any] = {}
        for revision in outcome.revisions:
            latest_revision[revision.stream] = revision
        for stream, revision in latest_revision.items():
            stats = outcome.revision_stats.get(stream)
            metrics.record_consistency(
                stream,
                residual=stats.residual if stats else 0.0,
                duration_seconds=stats.seconds if stats else 0.0,
                consistent_running_totals={k: float(v) for k, v in revision.totals.items()},
            )


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
