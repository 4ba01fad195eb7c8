"""Where output records go: the sink interface (issue 15).

A sink takes every record a run writes (:data:`streamdp.engine.records.AnyRecord`) and routes it
by its :attr:`kind` (``release``, ``consistent``, ``dead_letter``), never by its Python type. The
file replay writes through :class:`JsonLinesDirectorySink`; the daemon routes by the same kind to
its topics (:meth:`streamdp.daemon.service.OutputTopics.for_record`) and publishes through its
outbox. A new destination (a database table, an object store) is one class with ``write`` and
``close``, in one new module; nothing else changes.

Trust zones (docs/architecture.md): release and consistent records are public; dead letters hold
raw input and are protected. A sink that publishes must keep dead letters out of public reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Protocol

from streamdp.engine.protected_files import open_protected
from streamdp.engine.records import AnyRecord, RecordKind

#: The file of each record kind in a replay's output directory.
FILE_OF_KIND: Mapping[RecordKind, str] = {
    "release": "releases.jsonl",
    "consistent": "consistent.jsonl",
    "dead_letter": "dead_letter.jsonl",
}
#: The kinds whose records hold raw input (their files are created readable by the owner only).
PROTECTED_KINDS: frozenset[RecordKind] = frozenset({"dead_letter"})


class RecordSink(Protocol):
    """A destination of output records."""

    def write(self, record: AnyRecord) -> None:
        """Take one record (in the order the engine produced it)."""

    def close(self) -> None:
        """Flush and release what the sink holds; no write follows."""


def write_all(sink: RecordSink, records: Iterable[AnyRecord]) -> None:
    """Write ``records`` to ``sink`` in order."""
    for record in records:
        sink.write(record)


class JsonLinesDirectorySink:
    """One JSON-lines file per record kind in ``directory`` (:data:`FILE_OF_KIND`), each record
    on its own line as :meth:`to_json` gives it. Creates (truncates) the three files, those of
    :data:`PROTECTED_KINDS` readable by the owner only."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._files: dict[RecordKind, IO[str]] = {}
        try:
            for kind, name in FILE_OF_KIND.items():
                path = self.directory / name
                self._files[kind] = (
                    open_protected(path)
                    if kind in PROTECTED_KINDS
                    else path.open("w", encoding="utf-8")
                )
        except OSError:
            self.close()
            raise

    def write(self, record: AnyRecord) -> None:
        self._files[record.kind].write(record.to_json() + "\n")

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
