"""How long the worker's Kafka consumer long-polls: 0.1 s instead of Faust's 1.5 s.

faust-streaming builds its aiokafka consumer with ``fetch_max_wait_ms=1500``. A broker answers a
fetch early only when data arrives on a partition named in the request, and aiokafka sends
nothing else to a broker while a fetch to it is outstanding. Two things then wait up to 1.5 s:

* a worker that is busy with a backlog on one partition while the others are idle: when the
  backlogged partition's fetched records wait for the worker longer than aiokafka's
  ``prefetch_backoff`` (0.1 s), aiokafka sends a fetch for the idle partitions alone, and the
  backlogged partition's next fetch waits behind that long-poll. On the embedded broker the
  queue of fetched records ran empty for 1.1-1.3 s about every 75,000 records this way;
* on a broker that does not answer early when data lands on one of several partitions (Tansu),
  every record that arrives while the worker is caught up (period-close latency).

The worker's ``fetch_wait_seconds`` (``--fetch-wait``, default 0.1 s) replaces it: an idle
worker sends ten small fetches a second per broker.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread


def tuned_fetching(base: type, *, fetch_wait_seconds: float) -> type:
    """A subclass of Faust's aiokafka consumer ``base`` whose underlying aiokafka consumer
    long-polls at most ``fetch_wait_seconds``."""
    wait_ms = max(1, round(fetch_wait_seconds * 1000))

    class TunedConsumerThread(AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> Any:
            consumer = super()._create_worker_consumer(transport)
            # read by AIOKafkaConsumer.start() when it builds its Fetcher
            consumer._fetch_max_wait_ms = wait_ms
            return consumer

    class TunedFetching(base):  # type: ignore[misc]
        def _new_consumer_thread(self) -> Any:
            return TunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    TunedFetching.__name__ = f"TunedFetching{base.__name__}"
    return TunedFetching
