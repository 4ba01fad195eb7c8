"""A faust-streaming transport consumer for a test: built in the running event loop on an app
whose broker address no test reaches (a closed loopback port), never started, and its client
thread's loop closed afterwards. Tests subclass Faust's consumer (or the adapter's subclasses of
it) with stand-ins for the broker's answers and drive its methods directly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import Any

import faust


async def nothing(*_args: Any) -> None:
    """A callback that does nothing (the consumer's rebalance callbacks)."""
    return


@contextlib.contextmanager
def stand_in_consumer(
    consumer_class: type,
    app_id: str,
    *,
    callback: Callable[[Any], Awaitable[None]] = nothing,
    acking_topics: Collection[str] = (),
) -> Iterator[Any]:
    """A ``consumer_class`` whose records go to ``callback``; Faust's per-record
    acknowledgements on for ``acking_topics``."""
    loop = asyncio.get_running_loop()
    app = faust.App(app_id, broker="kafka://127.0.0.1:9", loop=loop)
    app.topics._acking_topics.update(acking_topics)
    consumer = consumer_class(
        app.transport,
        callback=callback,
        on_partitions_revoked=nothing,
        on_partitions_assigned=nothing,
        loop=loop,
    )
    try:
        yield consumer
    finally:
        consumer._thread.thread_loop.close()  # the client thread's loop, never started
