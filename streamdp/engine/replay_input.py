"""Checking that a replay's input file is JSON Lines before any budget is spent.

A CSV file, an empty file or a file of another format used to be replayed as a batch of
rejected records: the whole budget was spent on releases of pure noise. :func:`events_start`
refuses such a file from its first non-blank line alone (never from how many later records are
accepted or rejected: that would make the refusal, and so the release, depend on the data), and
skips a leading UTF-8 byte-order mark, which editors on Windows write.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamdp.errors import ConfigError

UTF8_BOM = b"\xef\xbb\xbf"

_EXPECTED = "expected JSON Lines: one JSON object per line, e.g. a file from `streamdp synth`"


def events_start(path: Path) -> int:
    """Where the events of ``path`` start: after a UTF-8 byte-order mark if the file begins
    with one, else 0. Raises :class:`ConfigError` when the file holds no non-blank line or its
    first non-blank line is not a JSON object. The message names the file, never the line's
    content nor its number (raw data)."""
    try:
        with path.open("rb") as handle:
            start = len(UTF8_BOM) if handle.read(len(UTF8_BOM)) == UTF8_BOM else 0
            handle.seek(start)
            first = next((line for line in handle if line.strip()), None)
    except OSError as error:
        raise ConfigError(f"--input {str(path)!r} cannot be read: {error.strerror}") from None
    if first is None:
        raise ConfigError(f"--input {str(path)!r} holds no records (it is empty); {_EXPECTED}")
    if not _is_json_object(first):
        raise ConfigError(
            f"--input {str(path)!r} is not JSON Lines: its first non-blank line is not a JSON "
            f"object; {_EXPECTED}"
        )
    return start


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # not UTF-8, or not JSON
        return False
