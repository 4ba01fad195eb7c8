"""The worker's aiokafka consumer long-polls for ``--fetch-wait`` seconds, not Faust's 1.5 s
(streamdp.daemon.fetching explains the stalls the long poll causes; the daemon benchmark
measures them)."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path

import pytest

from streamdp.daemon.app import create_app
from streamdp.daemon.settings import DaemonSettings


@pytest.mark.parametrize("input_path", ["batch", "stream"])
@pytest.mark.parametrize(("fetch_wait", "expected_ms"), [(0.1, 100), (0.25, 250), (2.0, 2000)])
def test_the_worker_consumer_long_polls_for_the_configured_time(
    tmp_path: Path, input_path: str, fetch_wait: float, expected_ms: int
) -> None:
    spec = Path(str(resources.files("streamdp").joinpath("examples", "restaurant.toml")))
    settings = DaemonSettings(
        config=spec, data_dir=tmp_path, fetch_wait_seconds=fetch_wait, input_path=input_path
    )

    async def go() -> tuple[int, int]:
        app, _ = create_app(settings)
        thread = app.consumer._new_consumer_thread()  # type: ignore[attr-defined]
        consumer = thread._create_worker_consumer(app.transport)
        try:
            # the value AIOKafkaConsumer.start() hands to its Fetcher; and Faust's own
            # configuration beside it is left as it was (1 MB per partition)
            return consumer._fetch_max_wait_ms, consumer._max_partition_fetch_bytes
        finally:
            await consumer.stop()

    assert asyncio.run(go()) == (expected_ms, 1024**2)
