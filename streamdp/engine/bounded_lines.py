"""The lines of a replay's input file, each held in at most a bounded number of bytes.

A replay judges its input one line at a time; a line longer than a record may be is refused
(``too_large``) without being parsed. Reading such a line whole first (``for line in file``)
made its memory the replay's: one 1.5 GB line in a file of ordinary records took the replay
from 124 MB to 7.3 GB, and under a memory limit it ended with ``MemoryError`` and released
nothing, so whether anything was published depended on one record (audit of 2026-11-28).

:func:`bounded_lines` reads each line in chunks: it keeps a line whole only up to ``limit + 1``
bytes (enough for the judge to see that it is over ``limit``), and of a longer line keeps that
prefix and measures the rest as it streams past: its length and SHA-256 (of the line without
its ending, as the dead letter of a line read whole gives them), and whether it is blank.
Lines within the limit come out as plain ``bytes``, at the cost of the file's own iteration.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

#: Bytes read at a time from an overlong line.
CHUNK_BYTES = 1 << 20
#: What ends a line's content (``bytes.rstrip(LINE_ENDING)``).
LINE_ENDING = b"\r\n"
NEWLINE = ord("\n")


@dataclass(frozen=True)
class Overlong:
    """A line whose content (the line without the ``\\r``/``\\n`` characters at its end) is
    longer than the limit: its first ``limit + 1`` bytes, and the whole content's length and
    SHA-256."""

    head: bytes
    bytes_read: int  # of the file, ending included (for a progress bar)
    blank: bool  # nothing but ASCII whitespace (a replay skips it)
    length: int
    sha256: str


def bounded_lines(handle: IO[bytes], limit: int) -> Iterator[bytes | Overlong]:
    """Every line of ``handle`` (read from its position), none held in more than about
    ``limit + CHUNK_BYTES`` bytes: a line whose content is at most ``limit`` bytes as the
    file's own iteration gives it (its ending included), a longer one as :class:`Overlong`.
    Whole lines cost what ``for line in handle`` costs, plus one length check."""
    keep = limit + 1
    for head in iter(functools.partial(handle.readline, keep), b""):
        if len(head) < keep or head[-1] == NEWLINE:  # the whole line
            yield head
        else:
            yield _overlong(handle, head, limit)


def _overlong(handle: IO[bytes], head: bytes, limit: int) -> bytes | Overlong:
    """The line whose first ``limit + 1`` bytes are ``head``, the rest streamed past. Its
    content may still be within ``limit`` (``\\r`` characters before its ``\\n``): then it
    is given as that content and a newline."""
    digest = hashlib.sha256()
    read, length, blank = 0, 0, True
    held = 0  # line-ending characters not yet known to be inside the content
    chunk = head
    while chunk:
        read += len(chunk)
        blank = blank and not chunk.strip()
        body = chunk.rstrip(LINE_ENDING)
        if body:  # the characters held so far are inside the content after all
            _feed_held(digest, held)
            length += held
            held = 0
        digest.update(body)
        length += len(body)
        held += len(chunk) - len(body)
        if chunk.endswith(b"\n"):
            break
        chunk = handle.readline(CHUNK_BYTES)
    if length <= limit:
        return head[:length] + b"\n"
    return Overlong(head, read, blank, length, digest.hexdigest())


def _feed_held(digest: Any, held: int) -> None:
    """Feed ``held`` carriage returns (the only ending character a line holds before its
    end) to ``digest``, a chunk at a time."""
    while held:
        step = min(held, CHUNK_BYTES)
        digest.update(b"\r" * step)
        held -= step
