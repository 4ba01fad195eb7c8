"""A worker expelled from its group without knowing it publishes nothing more (Apache Kafka).

Two workers share a consumer group; the one owning the source is frozen (SIGSTOP) past the
session timeout, so the broker expels it and the other takes the source over from the state
changelog and goes on closing periods on the public clock. Then the frozen worker resumes:
its tick is overdue and the source is still in its (stale) assignment, so without a fence it
closes the periods its successor already closed, each with a new secure draw, and publishes a
second value for the same release. With the membership lease
(``streamdp.daemon.membership_lease``) its commit finds the lease run out, waits for the
coordinator to confirm the membership (it does not: the member is gone), writes nothing and
exits with 75. Every release key then carries one value.

The noise is the secure sampler's, so two draws of one release differ (a seeded sampler could
repeat itself); the clock is simulated, one day every 1.5 s, so periods close while the test
watches.
"""

from __future__ import annotations

import signal
import time
from importlib import resources
from pathlib import Path

import pytest
from daemon_harness import Worker, collect

from streamdp.broker import KafkaBroker
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.engine import parse_spec
from streamdp.errors import EXIT_INPUT_GAP

pytestmark = [pytest.mark.broker, pytest.mark.slow]
SOURCE = "restaurant-orders"
SECONDS_PER_DAY = 1.5


def _owner(workers: list[Worker]) -> list[Worker]:
    return [w for w in workers if SOURCE in ((w.status() or {}).get("sources_owned") or [])]


def _wait(condition, what: str, timeout: float, workers: list[Worker]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n\n".join(w.diagnosis(40) for w in workers if w.process.poll() is None)
            raise AssertionError(f"{what} not within {timeout} s\n{tails}")
        time.sleep(0.25)


def test_a_worker_frozen_past_the_session_timeout_publishes_no_second_draw(
    broker, tmp_path: Path, unique_name
) -> None:  # type: ignore[no-untyped-def]
    if not isinstance(broker, KafkaBroker):
        pytest.skip("Apache Kafka expels a silent member on its own (Tansu only on a JoinGroup)")
    suffix = unique_name("fence")
    text = resources.files("streamdp").joinpath("examples", "restaurant.toml").read_text()
    text = text.replace(f'topic = "{SOURCE}"', f'topic = "orders-{suffix}"')
    config = tmp_path / "streams.toml"
    config.write_text(text)
    app_id = f"app-{suffix}"
    namespace = f"out-{suffix}"
    topics = OutputTopics.in_namespace(namespace)
    settings = DaemonSettings(
        config=config, bootstrap=broker.bootstrap, partitions=1, app_id=app_id, topics=topics
    )
    broker.create_topics(required_topics(parse_spec(text), settings))
    # the spec's first day starts 3 s from now and a day passes every 1.5 s
    clock = f"simulated:2024-01-01T00:00:00Z@{time.time() + 3:.3f}x{86400 / SECONDS_PER_DAY:g}"
    workers = [
        Worker(
            broker,
            config,
            app_id=app_id,
            partitions=1,
            data_dir=tmp_path / f"d{n}",
            log_path=tmp_path / f"w{n}.log",
            namespace=namespace,
            clock=clock,
            seed=None,  # secure noise: a second draw of a release differs from the first
            extra_args=("--delivery-allowance", "0.3"),
        )
        for n in range(2)
    ]
    try:
        for worker in workers:
            worker.wait_ready()
        _wait(lambda: len(_owner(workers)) == 1, "one owner of the source", 60, workers)
        (frozen,) = _owner(workers)
        (successor,) = [w for w in workers if w is not frozen]
        time.sleep(3 * SECONDS_PER_DAY)  # the owner publishes a few days
        frozen.process.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            _wait(lambda: _owner([successor]) == [successor], "the takeover", 60, [successor])
            time.sleep(4 * SECONDS_PER_DAY)  # the successor publishes days of its own
        finally:
            frozen._stop_supervising()  # an exit stays an exit: nothing restarts it
            frozen.process.send_signal(signal.SIGCONT)
        frozen_for = time.monotonic() - frozen_at
        deadline = time.monotonic() + 30
        while frozen.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.25)
        time.sleep(3 * SECONDS_PER_DAY)  # the successor goes on
        seen = collect(broker, [topics.releases], lambda _seen: False, timeout=6)
        releases = seen[topics.releases]
        assert len(releases) >= 8, sorted(releases)
        twice = {key: values for key, values in releases.items() if len(set(values)) > 1}
        assert not twice, (
            f"releases published with two values after a {frozen_for:.1f} s freeze: "
            f"{sorted(twice)}\n{frozen.log_tail(80)}"
        )
        code = frozen.process.poll()
        assert code == EXIT_INPUT_GAP, f"the resumed worker: {frozen.diagnosis(60)}"
        assert "wrote nothing more" in frozen.log_tail(200)
        assert successor.process.poll() is None, successor.log_tail()
    finally:
        for worker in workers:
            worker.stop()  # (an exited one: its log closed)
