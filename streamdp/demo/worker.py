"""One ``streamdp worker`` subprocess for the demo: started in its own session, stopped cleanly.

The worker runs in its own session (process group) so that a Ctrl-C in the terminal reaches only
the demo, which then stops the worker itself (SIGTERM, wait, SIGKILL as a last resort) in the
right order. On Linux the worker also asks the kernel for SIGKILL if the demo process dies
without cleaning up (``PR_SET_PDEATHSIG``), so it can never be orphaned.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent exits (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


def worker_command(
    *,
    config: Path,
    bootstrap: str,
    partitions: int,
    web_port: int,
    data_dir: Path,
    insecure_seed: int | None,
    clock: str = "wall",
) -> list[str]:
    """The argv of a demo worker (this interpreter, ``-m streamdp worker``).

    ``insecure_seed`` None uses the production OpenDP sampler; an integer selects the INSECURE
    seeded sampler (reproducible demo noise, labelled as such by the demo).
    """
    argv = [
        sys.executable,
        "-m",
        "streamdp",
        "worker",
        "--config",
        str(config),
        "--bootstrap",
        bootstrap,
        "--partitions",
        str(partitions),
        "--web-port",
        str(web_port),
        "--web-host",
        "127.0.0.1",
        "--data-dir",
        str(data_dir),
        "--single-record-batches",
        "--session-timeout",
        "6",
        "--log-level",
        "warning",
        "--clock",
        clock,
    ]
    if insecure_seed is not None:
        argv += ["--insecure-seed", str(insecure_seed)]
    return argv


class WorkerProcess:
    """A running worker subprocess writing its output to ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
        )

    @property
    def pid(self) -> int:
        """Process id of the worker."""
        return self.process.pid

    def exit_code(self) -> int | None:
        """The exit code if the worker has exited, else None."""
        return self.process.poll()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait up to ``timeout`` s (the worker commits and flushes), then SIGKILL.

        Returns the exit code (negative: killed by that signal). Idempotent.
        """
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            self._log.close()
        return int(self.process.returncode)

    def log_tail(self, n_lines: int = 20) -> str:
        """The last lines of the worker's output (for error messages)."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as error:
            return f"(worker log {self.log_path} unreadable: {error})"
        return "\n".join(lines[-n_lines:]) if lines else "(the worker wrote nothing)"
