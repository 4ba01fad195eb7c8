"""A worker's logs carry no record values, even at --log-level debug, and its root logger keeps
the level asked for (Faust's start-up spinner would set it to DEBUG)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import faust
import pytest

from streamdp.daemon.app import create_app
from streamdp.daemon.log_safety import VALUE_LOGGERS, plain_worker
from streamdp.daemon.settings import DaemonSettings

SPEC = Path(str(resources.files("streamdp").joinpath("examples", "restaurant.toml")))


@pytest.fixture
def clean_logging() -> Iterator[None]:
    """Restore the logger levels and root handlers a test changes."""
    names = ["", *VALUE_LOGGERS]
    levels = {name: logging.getLogger(name).level for name in names}
    handlers = list(logging.root.handlers)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.root.handlers[:] = handlers


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
