"""Input progress as the worker reports it (``streamdp.daemon.observation.InputProgress``).

What these tests prove, without a broker (the consumer's end offsets are a dict):
- the lag of a topic is the sum over its partitions of the records past each one's last
  processed offset, and the input counter adds up the records of every batch;
- a partition whose end offset cannot be read (aiokafka's AssertionError for a partition revoked
  meanwhile) keeps its last lag and does not stop the others from being reported;
- the next offset to process only moves forward, and a processed batch restarts the stall
  watchdog's clock of its partitions.
"""

from __future__ import annotations

from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from streamdp.daemon.observation import InputProgress
from streamdp.daemon.stall_watch import FetchView, InputStallWatch
from streamdp.metrics import StreamdpMetrics

ORDERS = "orders"
CENSUS = "census"


def samples(metrics: StreamdpMetrics, name: str) -> dict[str, float]:
    """The values of sample ``name`` by its topic label."""
    text = metrics.exposition().decode("utf-8")
    return {
        sample.labels["topic"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


class EndOffsets:
    """The consumer's end offset per partition; a partition in ``revoked`` raises as aiokafka
    does for one no longer assigned."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.revoked: set[TP] = set()

    def __call__(self, tp: TP) -> int:
        if tp in self.revoked:
            raise AssertionError(f"partition {tp} is not assigned")
        return self.ends[tp]


def test_lag_is_summed_over_a_topics_partitions_and_input_adds_up() -> None:
    metrics = StreamdpMetrics(input_volume=True)
    progress = InputProgress(metrics, InputStallWatch(30.0))
    highwater = EndOffsets({TP(ORDERS, 0): 100, TP(ORDERS, 1): 50, TP(CENSUS, 0): 10})
    # (last offset processed, records in the batch) per partition
    progress.observe(
        {(ORDERS, 0): (59, 60), (ORDERS, 1): (19, 20), (CENSUS, 0): (9, 10)}, highwater
    )
    assert samples(metrics, "streamdp_consumer_lag_records") == {ORDERS: 40 + 30, CENSUS: 0}
    progress.observe({(ORDERS, 0): (99, 40)}, highwater)
    assert samples(metrics, "streamdp_consumer_lag_records")[ORDERS] == 0 + 30
    assert samples(metrics, "streamdp_input_records_total") == {ORDERS: 120, CENSUS: 10}


def test_a_revoked_partition_keeps_its_lag_and_the_others_are_reported() -> None:
    metrics = StreamdpMetrics(input_volume=True)
    progress = InputProgress(metrics, InputStallWatch(30.0))
    highwater = EndOffsets({TP(ORDERS, 0): 100, TP(ORDERS, 1): 50})
    progress.observe({(ORDERS, 0): (9, 10), (ORDERS, 1): (9, 10)}, highwater)
    highwater.revoked.add(TP(ORDERS, 0))
    highwater.ends[TP(ORDERS, 1)] = 80
    progress.observe({(ORDERS, 0): (19, 10), (ORDERS, 1): (19, 10)}, highwater)
    assert progress.lag == {(ORDERS, 0): 90, (ORDERS, 1): 60}
    assert samples(metrics, "streamdp_consumer_lag_records") == {ORDERS: 150}
    assert progress.next_offset == {(ORDERS, 0): 20, (ORDERS, 1): 20}
    # once the rebalance revokes it, its lag is its next owner's: not summed here any more
    progress.revoked([(ORDERS, 0)])
    assert progress.lag == {(ORDERS, 1): 60}
    assert samples(metrics, "streamdp_consumer_lag_records") == {ORDERS: 60}


def test_next_offset_only_moves_forward_and_progress_restarts_the_stall_clock() -> None:
    metrics = StreamdpMetrics(input_volume=True)
    watch = InputStallWatch(10.0)
    progress = InputProgress(metrics, watch)
    highwater = EndOffsets({TP(ORDERS, 0): 100})
    behind = FetchView(end=100, fetched=None, leader=1, leader_reachable=True)
    key = (ORDERS, 0)
    assert watch.check(key, behind, 0, blocked=False, now=0.0) is None  # the clock starts
    assert watch.check(key, behind, 0, blocked=False, now=10.0) == 10.0  # stalled
    progress.observe({key: (49, 50)}, highwater)
    assert watch.check(key, behind, 50, blocked=False, now=10.0) is None  # restarted at 10
    assert watch.check(key, behind, 50, blocked=False, now=19.0) is None
    progress.observe({key: (29, 30)}, highwater)  # a re-delivered older batch
    assert progress.next_offset == {key: 50}


def test_a_stream_that_stopped_at_its_horizon_starts_with_an_infinite_period() -> None:
    """A restarted worker exports ``streamdp_period_seconds`` before any release: a stream with
    ``on_epoch_end = "stop"`` whose last close instant has passed will never release again, so
    its period is +Inf (or the no-release alerts would fire on it for ever); before that
    instant, and for a rolling stream, the first period's length."""
    import math
    from dataclasses import replace

    from streamdp.daemon.observation import period_seconds_at_start
    from streamdp.engine.periods import PeriodClock
    from streamdp.synth import example_spec

    stream = next(iter(example_spec("restaurant").streams.values()))
    stopping = replace(stream, on_epoch_end="stop", horizon=3)
    clock = PeriodClock(stopping.period)
    day = clock.bounds(0)[1] - clock.bounds(0)[0]
    last_close = clock.bounds(2)[1] + stopping.allowed_lateness_seconds
    assert period_seconds_at_start(stopping, last_close - 1) == day
    assert period_seconds_at_start(stopping, last_close) == math.inf
    assert period_seconds_at_start(replace(stopping, on_epoch_end="roll"), last_close) == day
