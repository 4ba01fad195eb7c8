"""What every broker launcher here needs: a child broker process it owns, on 127.0.0.1.

Free ports on loopback and a check that a listener accepts connections; the child's lifetime
(it dies with its parent on Linux through ``PR_SET_PDEATHSIG``, is stopped with SIGTERM then
SIGKILL, and an ``atexit`` hook stops every launcher still running); the tail of its log for
error messages; the ``with`` block that starts and closes a launcher; and creating topics with
the aiokafka admin client (request checks, the broker's per-topic answers, a blocking call that
is safe inside a running event loop). Used by the embedded Tansu broker and the Kafka nodes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

from streamdp.errors import BrokerError

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
_TOPIC_ALREADY_EXISTS = 36
_T = TypeVar("_T")


# -- ports ---------------------------------------------------------------------------------------


def free_loopback_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    return ports


def accepts_tcp(port: int) -> bool:
    """True when something accepts a TCP connection on 127.0.0.1:``port`` within 0.5 s."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


# -- the child process ---------------------------------------------------------------------------


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when the parent thread exits."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


def signal_process(process: subprocess.Popen[bytes], sig: int, *, group: bool) -> None:
    """Send ``sig`` to a still running ``process`` (to its whole process group if ``group``)."""
    if process.poll() is not None:
        return
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)


def stop_process(process: subprocess.Popen[bytes], timeout: float, *, group: bool) -> None:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL; returns once the process has exited."""
    if process.poll() is not None:
        return
    signal_process(process, signal.SIGTERM, group=group)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_process(process, signal.SIGKILL, group=group)
        process.wait()


def log_tail(path: Path, n_lines: int = 25) -> str:
    """The last ``n_lines`` of a broker's log, or why it cannot be read (for error messages)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        return f"(log {path} unreadable: {error})"
    return "\n".join(lines[-n_lines:]) if lines else "(log is empty)"


class _Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


_STOP_AT_EXIT: weakref.WeakKeyDictionary[_Stoppable, float] = weakref.WeakKeyDictionary()


def stop_at_exit(launcher: _Stoppable, timeout: float) -> None:
    """Have ``launcher.stop(timeout=timeout)`` called at interpreter exit if it still runs."""
    _STOP_AT_EXIT[launcher] = timeout


def forget_at_exit(launcher: _Stoppable) -> None:
    """``launcher`` has stopped: nothing to do for it at exit."""
    _STOP_AT_EXIT.pop(launcher, None)


@atexit.register
def _stop_all() -> None:
    for launcher, timeout in list(_STOP_AT_EXIT.items()):
        with contextlib.suppress(Exception):
            launcher.stop(timeout=timeout)


class BrokerLauncher(ABC):
    """A launcher used as a context manager: ``start()`` on entry, ``close()`` on exit."""

    @abstractmethod
    def start(self) -> Self:
        """Start the broker process(es); return once clients can use them."""

    @abstractmethod
    def close(self) -> None:
        """Stop the broker process(es) and delete what was only temporary."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# -- topics through the admin client -------------------------------------------------------------


def check_new_topics(topics: Mapping[str, int], **per_topic: Mapping[str, object]) -> None:
    """Raise :class:`BrokerError` unless every topic has a name and >= 1 partition and every
    ``per_topic`` mapping (``config=...``, ``leaders=...``) names only topics being created."""
    bad = {name: n for name, n in topics.items() if not name or n < 1}
    if bad:
        raise BrokerError(f"topics need a name and >= 1 partition, got {bad}")
    unknown = set().union(*per_topic.values()) - set(topics)
    if unknown:
        raise BrokerError(
            f"{' or '.join(per_topic)} given for topics not being created: {sorted(unknown)}"
        )


def raise_refused_topics(response: Any, *, exist_ok: bool, broker: str) -> None:
    """Raise :class:`BrokerError` naming every topic ``broker`` refused in a CreateTopics
    ``response`` (an existing topic is fine with ``exist_ok``)."""
    failures: list[str] = []
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        if code == 0 or (code == _TOPIC_ALREADY_EXISTS and exist_ok):
            continue
        message = entry[2] if len(entry) > 2 else None
        failures.append(f"{name!r}: Kafka error {code} ({message})")
    if failures:
        raise BrokerError(
            f"{broker} refused to create topics: "
            + "; ".join(failures)
            + " (use exist_ok=True to accept existing topics, or pick new names)"
        )


def run_in_thread(factory: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine on its own event loop in a helper thread and return its result.

    Safe with or without a running event loop: synchronous code called inside a coroutine can
    use it (it blocks that loop meanwhile). An exception is re-raised in the calling thread.
    """
    results: list[_T] = []
    errors: list[BaseException] = []

    def work() -> None:
        async def wrapped() -> _T:
            return await factory()

        try:
            results.append(asyncio.run(wrapped()))
        except BaseException as error:  # re-raised in the calling thread
            errors.append(error)

    thread = threading.Thread(target=work, name="streamdp-broker-admin")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
