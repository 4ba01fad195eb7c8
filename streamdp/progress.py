"""Progress lines on stderr for long commands (``synth``, ``replay``), never on stdout.

Drawn when stderr is a terminal (one line rewritten in place) or when the command's
``--progress`` flag asks for it (then one line per update, for logs), at most once per
``interval`` seconds of the given clock, so stdout and any file a command writes stay exactly
what they are without it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, cast


class ProgressLine:
    """``label: done/total unit (percent), detail`` on ``stream``, throttled to ``interval``."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        *,
        forced: bool = False,
        stream: IO[str] | None = None,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = max(total, 1)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty()
        self.enabled = forced or self.terminal
        self.interval = interval
        self.clock = clock
        self._last: float | None = None
        self.drawn = 0

    def text(self, done: int, detail: str = "") -> str:
        """The line for ``done`` of ``total`` (no newline)."""
        fraction = min(done / self.total, 1.0)
        tail = f", {detail}" if detail else ""
        return f"{self.label}: {done:,}/{self.total:,} {self.unit} ({fraction:.0%}){tail}"

    def update(self, done: int, detail: str = "") -> None:
        """Draw the line if enabled and ``interval`` has passed since the last one."""
        if not self.enabled:
            return
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        self._draw(self.text(done, detail))

    def finish(self, done: int, detail: str = "") -> None:
        """The final line (always drawn when enabled), ending the rewritten line."""
        if self.enabled:
            self._draw(self.text(done, detail))
            if self.terminal:
                self.stream.write("\n")
                self.stream.flush()

    def _draw(self, line: str) -> None:
        self.drawn += 1
        if self.terminal:
            self.stream.write("\r\x1b[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class _DrawAnyway:
    """``stream`` reporting itself as a terminal, for code that draws progress only on one."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        # a line per update in a log instead of carriage returns
        return self._stream.write(text.replace("\r", "\n") if text.startswith("\r") else text)

    def flush(self) -> None:
        self._stream.flush()


def progress_stream(forced: bool, stream: IO[str] | None = None) -> IO[str]:
    """``stream`` (stderr by default) as given, or, with ``forced`` (``--progress``), one that
    lets progress drawn only on terminals be drawn on it too."""
    target = stream if stream is not None else sys.stderr
    return cast(IO[str], _DrawAnyway(target)) if forced else target
