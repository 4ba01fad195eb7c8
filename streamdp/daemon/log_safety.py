"""Logging in a worker process: no protected values in any log line, and no cost below the level.

Two libraries log record values at DEBUG: Faust's topic sender (``send: topic=... v=...``) and
aiokafka's producer (``Sending (key=... value=...)``). A worker sends its state table's changelog
through them, and that holds raw counts: at ``--log-level debug`` they would print un-noised
data. Their loggers are held at INFO whatever the level asked for.

Faust's worker also sets the root logger to DEBUG when it shows its start-up spinner (the
spinner turns once per log record), so every DEBUG call of Faust, mode and aiokafka builds a
record that no handler prints. The worker runs without the spinner: the root keeps the level
asked for.
"""

from __future__ import annotations

import logging
from typing import TypeVar

Worker = TypeVar("Worker")

#: Loggers whose DEBUG lines carry record keys and values.
VALUE_LOGGERS = ("faust.topics", "aiokafka.producer.producer")


def hold_value_loggers() -> None:
    """Keep the loggers that print record values at INFO or above."""
    for name in VALUE_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.INFO:  # NOTSET (0) follows the root, which may go to DEBUG
            logger.setLevel(logging.INFO)


def plain_worker(worker: Worker) -> Worker:
    """``worker`` (a ``faust.Worker``) without the start-up spinner; returns it."""
    worker.spinner = None  # type: ignore[attr-defined]
    return worker
