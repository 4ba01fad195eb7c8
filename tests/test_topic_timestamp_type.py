"""The worker warns at start, from the topic's configuration, about an input topic stamped with
the broker's append time (LogAppendTime), instead of when the first such record arrives: the
moment of an arrival warning told anyone reading the public logs that a record had arrived
(audit of 2026-11-28). Asked of a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topic_check import TIMESTAMP_TYPE, broker_stamped_topics, verify_topics
from tests.conftest import AnyBroker

SPEC = Path("streamdp/examples/hiv.toml")


def test_an_input_topic_configured_with_log_append_time_is_warned_about_at_start(
    broker: AnyBroker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stamped, created = unique_name("stamped"), unique_name("created")
    broker.create_topics({stamped: 1}, config={stamped: {TIMESTAMP_TYPE: "LogAppendTime"}})
    broker.create_topics({created: 1}, config={created: {TIMESTAMP_TYPE: "CreateTime"}})
    settings = DaemonSettings(
        config=SPEC, data_dir=tmp_path, bootstrap=broker.bootstrap, partitions=1
    )
    described = asyncio.run(broker_stamped_topics(settings, [stamped, created]))
    err = capsys.readouterr().err
    if "does not describe topic configurations" in err:  # Tansu closes the connection
        pytest.skip(f"this broker does not describe topic configurations: {err.strip()}")
    assert described == [stamped]

    asyncio.run(verify_topics(settings.validate(), {stamped: 1, created: 1}, [stamped, created]))
    warned = [line for line in capsys.readouterr().err.splitlines() if "LogAppendTime" in line]
    assert len(warned) == 1
    assert f"input topic {stamped} is configured with {TIMESTAMP_TYPE}=LogAppendTime" in warned[0]
    assert created not in warned[0]
