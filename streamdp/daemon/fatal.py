"""Ending the worker on a fatal error: one line in the log, then the exit status of the error.

Faust marks a crashed task, timer or service (a producer whose send failed, a consumer whose
commit failed) and its parents as crashed, then keeps the process up (frozen, still "ready") or
lets a supervisor restart it for ever: :func:`exit_on_crash` makes every crash end the worker.
Nothing of the batch in flight is acknowledged on the way out: leaving through Faust could
commit its offsets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

from streamdp.daemon.exits import fatal_exit
from streamdp.daemon.runtime import WorkerRuntime
from streamdp.faust_internals import replace_crash_handler

log = logging.getLogger("streamdp.daemon")
__all__ = ["EndWorker", "exit_on_crash", "worker_ender", "worker_stopping"]


class EndWorker(Protocol):
    """Ends the worker with the exit status of ``reason`` (see :func:`worker_ender`)."""

    def __call__(self, reason: BaseException, *, even_when_stopping: bool = False) -> None:
        """Exit the process (or, while it stops anyway, do nothing unless told)."""


def worker_stopping(app: Any) -> bool:
    """True once the worker has begun to stop (read anew at each call)."""
    return bool(app.should_stop)


def worker_ender(app: Any, runtime: WorkerRuntime) -> EndWorker:
    """The function that ends this worker on a fatal error."""

    def end_worker(reason: BaseException, *, even_when_stopping: bool = False) -> None:
        """Stop being ready, log one line and exit with the status of ``reason`` (nothing of
        the batch in flight is acknowledged: leaving through Faust could commit its offsets).
        While the worker is stopping anyway, errors of closing services are left to Faust and
        the stop deadline, unless ``even_when_stopping``."""
        if not even_when_stopping and (worker_stopping(app) or runtime.shutting_down):
            return
        status, line = fatal_exit(reason, show_offsets=runtime.settings.metrics_input_volume)
        runtime.fatal = line
        log.critical("%s", line)
        logging.shutdown()
        os._exit(status)

    return end_worker


def exit_on_crash(app: Any, end_worker: EndWorker) -> None:
    """Make both of Faust's crash paths (the synchronous handler and ``app.crash``) end the
    worker before Faust handles the crash."""

    def crash_then(faust_crash: Callable[[BaseException], None]) -> Callable[[BaseException], None]:
        def crash_and_exit(reason: BaseException) -> None:
            end_worker(reason)  # first: a crashed app reports should_stop
            faust_crash(reason)

        return crash_and_exit

    replace_crash_handler(app, crash_then)
    faust_crash_async = app.crash

    async def crash_async_and_exit(reason: BaseException) -> None:
        end_worker(reason)  # before Faust logs the crash with its traceback: one line only
        await faust_crash_async(reason)

    app.crash = crash_async_and_exit
