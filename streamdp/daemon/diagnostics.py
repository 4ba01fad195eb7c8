"""What a worker that seems stuck is doing, on request: ``kill -USR1 <pid>`` (or ``-USR2``).

The worker logs, at WARNING, where its asyncio tasks are suspended (the chain of coroutines
each awaits: function, file and line, code locations only; one line per distinct place), then
one line per assigned input partition as the stall watchdog sees it (the next offset whose
effects are durable, the committed offset, the end and fetch position the client knows, the
leader and whether it is connected) and whether the watchdog's clocks run now.

The worker of the ``mode`` library, which Faust's worker is, answers SIGUSR1 with a dump of
every task's frames *with their local variables* (record bytes and raw counts among them,
printed past the log-safety filter of ``streamdp.daemon.log_safety``) and SIGUSR2 by starting
``pdb`` in the event loop, which freezes a daemon; :func:`install_dump_signals` replaces both.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("streamdp.daemon")
__all__ = ["install_dump_signals", "suspension_chain", "task_report"]

_MAX_DEPTH = 40
#: CPython's awaitables that hold a task, coroutine or async generator without exposing it
_WRAPPERS = frozenset(
    {"FutureIter", "coroutine_wrapper", "async_generator_asend", "async_generator_athrow"}
)


def _awaited_frames(awaitable: Any) -> Iterator[FrameType]:
    """The frames of ``awaitable`` and of what it awaits (through tasks too), outermost first."""
    for _ in range(_MAX_DEPTH):
        if type(awaitable).__name__ in _WRAPPERS:
            # what ``await`` holds on a task (its future iterator), on an object whose
            # __await__ returns ``coro.__await__()`` (Faust's agents) and in ``async for`` over
            # an async generator: the task, coroutine or generator is only a referent of it
            awaitable = next((r for r in gc.get_referents(awaitable) if _is_awaited(r)), None)
        if isinstance(awaitable, asyncio.Task):
            awaitable = awaitable.get_coro()
        frame = (
            getattr(awaitable, "cr_frame", None)
            or getattr(awaitable, "ag_frame", None)
            or getattr(awaitable, "gi_frame", None)
        )
        if frame is None:
            return
        yield frame
        awaitable = (
            getattr(awaitable, "cr_await", None)
            or getattr(awaitable, "ag_await", None)
            or getattr(awaitable, "gi_yieldfrom", None)
        )


def _is_awaited(referent: object) -> bool:
    return (
        isinstance(referent, asyncio.Task)
        or inspect.iscoroutine(referent)
        or inspect.isasyncgen(referent)
    )


def suspension_chain(task: asyncio.Task[Any]) -> str:
    """Where ``task`` is suspended: ``function (file:line)`` of each coroutine it awaits,
    outermost first (``done`` for a finished task)."""
    if task.done():
        return "done"
    steps = [
        f"{frame.f_code.co_qualname} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"
        for frame in _awaited_frames(task)
    ]
    return " -> ".join(steps) or type(task.get_coro()).__name__


def task_report() -> list[str]:
    """Where the running loop's tasks are suspended (:func:`suspension_chain`), one line per
    distinct place with its number of tasks, sorted."""
    places = Counter(suspension_chain(task) for task in asyncio.all_tasks())
    return [f"{count} x {place}" for place, count in sorted(places.items())]


def log_dump(partition_report: Callable[[], list[str]]) -> None:
    """Log :func:`task_report` and ``partition_report()`` (never a frame's locals)."""
    lines = task_report()
    try:
        partitions = partition_report()
    except Exception as error:  # a diagnostic must never end the worker
        partitions = [f"(input partitions unavailable: {error!r})"]
    log.warning(
        "diagnostic dump (SIGUSR1/SIGUSR2): asyncio tasks\n%s\ninput partitions:\n%s",
        "\n".join(lines),
        "\n".join(partitions) or "(none assigned)",
    )


def install_dump_signals(worker: Any, partition_report: Callable[[], list[str]]) -> None:
    """Make ``worker`` (a ``faust.Worker``, not started) answer SIGUSR1 and SIGUSR2 by logging
    :func:`task_report` and ``partition_report()`` instead of mode's own handlers."""

    def dump() -> None:
        log_dump(partition_report)

    # mode's Worker reads these when it installs its signal handlers (at start)
    worker._on_sigusr1 = dump
    worker._on_sigusr2 = dump


def replace_dump_signals_of_every_worker(
    worker_class: Any, partition_report: Callable[[], list[str]]
) -> None:
    """The same for every worker of ``worker_class`` (``faust.Worker``): Faust's own command
    line (``faust -A streamdp.daemon.faust_app worker``) builds its worker itself, and mode's
    SIGUSR1 handler would log every frame's local variables (raw partial sums among them)."""

    def dump(self: Any) -> None:  # noqa: ARG001
        log_dump(partition_report)

    worker_class._on_sigusr1 = dump
    worker_class._on_sigusr2 = dump
