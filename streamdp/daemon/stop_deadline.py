"""The stop deadline: after SIGTERM or SIGINT, a worker process ends within a bounded time.

Faust's graceful stop can wait far longer than an orchestrator allows (about a minute with the
broker unreachable, for ever behind a crashed producer). A daemon thread started by the first
stop signal ends the process with status :data:`streamdp.errors.EXIT_STOPPED` once the deadline
passes, whatever the event loop is doing; the checkpoint protocol makes that exact.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from streamdp.errors import EXIT_STOPPED

#: After SIGTERM or SIGINT, the longest wait for the graceful stop (finish the batch in flight,
#: flush, commit offsets); then the process exits anyway, as after a SIGKILL, which the
#: checkpoint protocol makes exact (nothing unacknowledged is lost: the next owner re-reads it).
STOP_DEADLINE_SECONDS = 5.0

_deadline_lock = threading.Lock()
_deadline_started = False


def arm_stop_deadline(worker: Any, seconds: float) -> None:
    """Make ``worker`` (a ``faust.Worker``) exit at the latest ``seconds`` after its first
    SIGTERM or SIGINT: Faust's graceful stop can wait far longer (about a minute with the broker
    unreachable, for ever behind a crashed producer). Call before the worker starts."""
    for name in ("_on_sigterm", "_on_sigint"):
        setattr(worker, name, _with_deadline(getattr(worker, name), seconds))


def _with_deadline(handler: Callable[[], None], seconds: float) -> Callable[[], None]:
    def on_signal() -> None:
        start_stop_deadline(seconds)
        handler()

    return on_signal


def start_stop_deadline(seconds: float) -> None:
    """Start the stop deadline (once per process): a daemon thread that ends the process with
    status 0 after ``seconds``, whatever the event loop is doing."""
    global _deadline_started  # noqa: PLW0603 - one deadline per process
    with _deadline_lock:
        if _deadline_started:
            return
        _deadline_started = True
    timer = threading.Timer(seconds, _exit_at_deadline, args=(seconds,))
    timer.daemon = True
    timer.start()


def _exit_at_deadline(seconds: float) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    line = (
        f"[{stamp}] [{os.getpid()}] [CRITICAL] not stopped {seconds:g} s after the stop signal: "
        f"exiting now (status {EXIT_STOPPED}); nothing unacknowledged is lost, the partitions' "
        "next owner re-reads it\n"
    )
    os.write(2, line.encode())  # not logging: its locks may be held by the stuck loop
    os._exit(EXIT_STOPPED)
