"""A worker's logs carry no record values or bytes, even at --log-level debug (a real produce
and fetch on the embedded broker), and its root logger keeps the level asked for (Faust's
start-up spinner would set it to DEBUG)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streamdp.broker import EmbeddedBroker
from streamdp.daemon.app import create_app
from streamdp.daemon.log_safety import VALUE_LOGGERS, hold_value_loggers, plain_worker
from streamdp.daemon.settings import DaemonSettings

SPEC = Path(str(resources.files("streamdp").joinpath("examples", "restaurant.toml")))


@pytest.fixture
def clean_logging() -> Iterator[None]:
    """Restore the logger levels, root handlers and record factory a test changes."""
    names = ["", *VALUE_LOGGERS]
    levels = {name: logging.getLogger(name).level for name in names}
    handlers = list(logging.root.handlers)
    factory = logging.getLogRecordFactory()
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.root.handlers[:] = handlers
    logging.setLogRecordFactory(factory)


def test_value_loggers_print_nothing_at_debug(
    tmp_path: Path, clean_logging: None, caplog: pytest.LogCaptureFixture
) -> None:
    for name in VALUE_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    create_app(DaemonSettings(config=SPEC, data_dir=tmp_path, log_level="debug"))
    caplog.set_level(logging.DEBUG)  # the root and every handler take DEBUG
    secret = "RAW-COUNT-4817"
    # the two calls that print what a worker sends (its state changelog holds raw counts)
    logging.getLogger("faust.topics").debug("send: topic=%r k=%r v=%r", "t", b"k", secret)
    logging.getLogger("aiokafka.producer.producer").debug("Sending (key=%s value=%s)", 1, secret)
    logging.getLogger("faust.topics").info("still logs at INFO")
    assert secret not in caplog.text
    assert "still logs at INFO" in caplog.text


def test_the_worker_keeps_the_root_logger_at_the_level_asked_for(
    tmp_path: Path, clean_logging: None
) -> None:
    app, _ = create_app(DaemonSettings(config=SPEC, data_dir=tmp_path))
    spinning = faust.Worker(app, loglevel="warning", quiet=True)
    spinning._setup_logging()
    # what Faust does on its own: every DEBUG call in the process builds a record
    assert logging.root.level == logging.DEBUG
    plain = plain_worker(faust.Worker(app, loglevel="warning", quiet=True))
    plain._setup_logging()
    assert logging.root.level == logging.WARNING


def test_record_bytes_are_withheld_from_every_logger_at_every_level(
    tmp_path: Path, clean_logging: None, caplog: pytest.LogCaptureFixture
) -> None:
    create_app(DaemonSettings(config=SPEC, data_dir=tmp_path, log_level="debug"))
    caplog.set_level(logging.DEBUG)
    secret = b"restaurant-orders|o2|RAW-RECORD-5521"
    other = logging.getLogger("some.library.nobody.held")
    other.debug("fetched %r", secret)
    other.error("batch %s", [secret, 3])
    other.warning("by name %(value)s", {"value": bytearray(secret)})
    other.info(secret)
    other.info("still logs %d %s", 42, "plain text")
    assert "RAW-RECORD-5521" not in caplog.text
    assert f"<{len(secret)} bytes withheld>" in caplog.text
    assert "still logs 42 plain text" in caplog.text


@pytest.mark.parametrize("input_volume", [False, True])
def test_changelog_offsets_are_withheld_from_public_logs(
    tmp_path: Path, clean_logging: None, caplog: pytest.LogCaptureFixture, input_volume: bool
) -> None:
    """Faust's recovery logs the state changelog's highwater at every start (the changelog
    takes a fixed number of writes per record, so it counts the input), and the clients' DEBUG
    lines name input offsets: without input-volume metrics (public logs) every number of those
    lines is withheld, with them it is shown."""
    settings = DaemonSettings(config=SPEC, data_dir=tmp_path, metrics_input_volume=input_volume)
    create_app(settings)
    caplog.set_level(logging.INFO)
    table = "| app-state-changelog | 0 | 4817 |"
    logging.getLogger("faust.tables.recovery").info("Highwater for %s:\n%s", "active", table)
    logging.getLogger("faust.tables.recovery").warning("remaining=%r", {"tp": 4817})
    logging.getLogger("faust.tables").info("offsets %d", 4817)
    logging.getLogger("faust.tablesque").info("not a table logger %d", 4817)
    # and the clients' few INFO lines that name an input offset
    logging.getLogger("faust.transport.consumer").info(
        "Discarded commit for revoked partitions that will be eventually processed again: %r",
        {"admissions-3": 4817},
    )
    logging.getLogger("aiokafka.consumer.fetcher").info(
        "Fetch offset %s is out of range for partition %s, resetting offset", 4817, "orders-0"
    )
    # at DEBUG the clients name input offsets in every fetch, seek and commit
    caplog.set_level(logging.DEBUG)
    fetcher = logging.getLogger("aiokafka.consumer.fetcher")
    fetcher.debug("Adding fetch request for partition %s at offset %d", "orders-0", 4817)
    logging.getLogger("faust.transport.consumer").debug("Commit offset %r", {"tp": 4817})
    recovery = [r.getMessage() for r in caplog.records if r.name.startswith("faust.tables.")]
    recovery += [r.getMessage() for r in caplog.records if r.name == "faust.tables"]
    recovery += [
        r.getMessage()
        for r in caplog.records
        if r.name in ("faust.transport.consumer", "aiokafka.consumer.fetcher")
        and r.levelno == logging.INFO
    ]
    recovery += [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(recovery) == 7
    if input_volume:
        assert all("4817" in line for line in recovery)
    else:
        assert not [line for line in recovery if re.search("[0-9]", line)], recovery
        assert "| app-state-changelog | # | # |" in recovery[0]  # the line still reads
    assert "not a table logger 4817" in caplog.text


def _produce_and_fetch(bootstrap: str, topic: str, marker: str) -> None:
    """One record holding ``marker`` produced and fetched back through aiokafka."""

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            value = f'{{"event_id": "{marker}", "note": "{marker}"}}'.encode()
            await producer.send_and_wait(topic, value, key=marker.encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            group_id=None, enable_auto_commit=False,
        )  # fmt: skip
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                values = [m.value for ms in batches.values() for m in ms if m.value]
                if any(marker.encode() in v for v in values):
                    return
            raise AssertionError(f"record with {marker} not fetched back within 30 s")
        finally:
            await consumer.stop()

    asyncio.run(go())


def test_a_real_produce_and_fetch_at_debug_logs_no_record_bytes(
    broker: EmbeddedBroker,
    new_topic: Callable[..., str],
    clean_logging: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # control: without the defences, aiokafka prints the record bytes at DEBUG
    logging.setLogRecordFactory(logging.LogRecord)
    for name in VALUE_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    leaked = f"LEAK{uuid.uuid4().hex[:12]}"
    _produce_and_fetch(broker.bootstrap, new_topic(), leaked)
    assert leaked in caplog.text
    caplog.clear()

    hold_value_loggers()  # what create_app does
    secret = f"MARK{uuid.uuid4().hex[:12]}"
    _produce_and_fetch(broker.bootstrap, new_topic(), secret)
    debug_lines = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(r.name.startswith("aiokafka") for r in debug_lines)  # DEBUG was really on
    assert secret not in caplog.text
    caplog.clear()

    # the record factory alone, with aiokafka's connection logger let through at DEBUG
    for name in VALUE_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    secret = f"MARK{uuid.uuid4().hex[:12]}"
    _produce_and_fetch(broker.bootstrap, new_topic(), secret)
    assert any(r.name == "aiokafka.conn" for r in caplog.records)
    # (public logs: the numbers of the libraries' DEBUG lines are withheld too, "_v#")
    assert re.search(r"<Produce[\w#]* withheld>", caplog.text)
    assert re.search(r"<Fetch[\w#]* withheld>", caplog.text)
    assert secret not in caplog.text


def test_a_worker_at_debug_logs_no_record_bytes(
    broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A real worker at --log-level debug reads a record holding a marker (fetch), and writes
    it into its dead letter and state changelog (produce): the marker never reaches its log."""
    from daemon_harness import Worker, collect, create_topics, make_scenario, produce

    from streamdp.daemon.routing import OutputTopics

    scenario = make_scenario(periods=2, rate=2, suffix=unique_name("x"))
    config = tmp_path / "spec.toml"
    config.write_text(scenario.spec_text)
    namespace = unique_name("ns")
    topics = OutputTopics.in_namespace(namespace)
    app_id = unique_name("logs")
    create_topics(broker, scenario, config, 1, app_id=app_id, topics=topics)
    log_path = tmp_path / "worker.log"
    worker = Worker(
        broker, config, app_id=app_id, partitions=1, data_dir=tmp_path / "d",
        log_path=log_path, namespace=namespace, extra_args=["--log-level", "debug"],
    )  # fmt: skip
    try:
        worker.wait_ready()
        marker = f"MARK{uuid.uuid4().hex[:12]}"
        topic = next(iter(scenario.lines))
        source = scenario.spec.source_of_topic(topic)
        assert source is not None
        produce(broker, [(topic, source.name.encode(), f'{{"broken": "{marker}'.encode())])

        def letter_arrived(seen: dict[str, dict[str, list[str]]]) -> bool:
            return any(marker in v for vs in seen[topics.dead_letter].values() for v in vs)

        seen = collect(broker, [topics.dead_letter], letter_arrived, timeout=60)
        assert letter_arrived(seen)  # the worker fetched it and produced its dead letter
    finally:
        worker.stop()
    text = log_path.read_text(errors="replace")
    assert "[DEBUG]" in text  # debug logging was on
    assert marker not in text
