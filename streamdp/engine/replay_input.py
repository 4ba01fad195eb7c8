"""What a replay may decide about its input file before reading it, and what only a check may say.

Whether a replay runs, and so whether anything is published, must not depend on any record of
the file: a refusal because the first line is not a JSON object (or because the file is empty)
lets the one record on that line switch every release between present and absent, for any
epsilon (audit of 2026-11-28: exit 2 and no release for D, exit 0 and every release for D plus
one record). So :func:`events_start` decides from public facts alone: the file can be read and
its *name* does not say it holds another format (a CSV or a spreadsheet, a spec, a compressed
file: the trap of spending the whole budget on releases of pure noise). What the content looks
like is for ``streamdp replay --check-input`` to say (:func:`first_line_hint`), on the
operator's terminal, spending nothing and publishing nothing: it is derived from raw records.

A leading UTF-8 byte-order mark (editors on Windows write one) is skipped: it belongs to the
file's encoding, not to any record.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamdp.engine.bounded_lines import Overlong, bounded_lines
from streamdp.engine.events import MAX_RECORD_BYTES
from streamdp.errors import ConfigError

UTF8_BOM = b"\xef\xbb\xbf"

#: Name endings of files that are not JSON Lines (lower case), with what they usually hold.
NOT_JSON_LINES = {
    ".csv": "comma-separated values",
    ".tsv": "tab-separated values",
    ".xls": "a spreadsheet",
    ".xlsx": "a spreadsheet",
    ".ods": "a spreadsheet",
    ".parquet": "Parquet",
    ".avro": "Avro",
    ".toml": "TOML (a stream spec?)",
    ".yaml": "YAML",
    ".yml": "YAML",
    ".gz": "a compressed file",
    ".bz2": "a compressed file",
    ".xz": "a compressed file",
    ".zst": "a compressed file",
    ".zip": "an archive",
}

_EXPECTED = "expected JSON Lines: one JSON object per line, e.g. a file from `streamdp synth`"


def events_start(path: Path) -> int:
    """Where the events of ``path`` start: after a UTF-8 byte-order mark if the file begins
    with one, else 0. Raises :class:`ConfigError` when the file cannot be read or its name ends
    in a format that is not JSON Lines (:data:`NOT_JSON_LINES`). Never looks at a record: an
    empty file, or one whose lines are not JSON, is replayed (every line dead-lettered, every
    due period released from noise alone), exactly as the same file with valid records would be
    released."""
    suffix = path.suffix.lower()
    if suffix in NOT_JSON_LINES:
        raise ConfigError(
            f"--input {str(path)!r} is named as {NOT_JSON_LINES[suffix]} ({suffix}), not JSON "
            f"Lines; {_EXPECTED}. If it does hold JSON Lines, rename it (e.g. to .jsonl); "
            "`streamdp replay --check-input` shows what a replay would count"
        )
    try:
        with path.open("rb") as handle:
            return len(UTF8_BOM) if handle.read(len(UTF8_BOM)) == UTF8_BOM else 0
    except OSError as error:
        raise ConfigError(f"--input {str(path)!r} cannot be read: {error.strerror}") from None


def first_line_hint(path: Path, start: int) -> str | None:
    """For ``--check-input`` only (protected: it reads a record): why the file looks like
    another format, or None when its first non-blank line is a JSON object."""
    with path.open("rb") as handle:
        handle.seek(start)
        first = next(
            (
                line
                for line in bounded_lines(handle, MAX_RECORD_BYTES)
                if (line.strip() if isinstance(line, bytes) else not line.blank)
            ),
            None,
        )
    if first is None:
        return f"the file holds no records (it is empty); {_EXPECTED}"
    if isinstance(first, Overlong):
        return (
            f"its first non-blank line is {first.length} bytes, more than a record may be "
            f"({MAX_RECORD_BYTES}); {_EXPECTED}"
        )
    if not _is_json_object(first):
        return f"its first non-blank line is not a JSON object (a CSV header?); {_EXPECTED}"
    return None


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested beyond the parser
        return False
