"""Files that hold raw data, created readable by their owner only.

A replay's dead letters (raw records), snapshot (open-period counts, pending node sums) and
ledger are protected like the input (docs/architecture.md, "Trust zones"). Created with the
process's umask (commonly 022) they were readable by every user of the machine (security
audit of 2026-11-28); :func:`open_protected` creates them with mode ``0600`` (the umask can
only narrow it), and :data:`PROTECTED_DIRECTORY_MODE` is the mode of an output directory a
replay creates (``0700``: it holds them). A file or directory that exists keeps its mode: the
operator chose it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

#: Mode of a protected file streamdp creates.
PROTECTED_FILE_MODE = 0o600
#: Mode of a directory streamdp creates to hold protected files.
PROTECTED_DIRECTORY_MODE = 0o700


def open_protected(path: str | Path, *, append: bool = False) -> IO[str]:
    """``path`` opened for writing UTF-8 text (truncated, or appended to with ``append``),
    created with :data:`PROTECTED_FILE_MODE` when it does not exist."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    descriptor = os.open(path, flags, PROTECTED_FILE_MODE)
    try:
        return os.fdopen(descriptor, "a" if append else "w", encoding="utf-8")
    except BaseException:
        os.close(descriptor)
        raise
