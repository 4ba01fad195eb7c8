"""File replay: drive the engine over a JSON-lines file (the backfill path; streamdp without Kafka).

A file is one batch: every event of the file is judged on its own (schema, contribution bound,
start and horizon, the future limit against ``as_of``) and counts if valid; nothing closes
while the file is read. Then the public instant ``as_of`` (``--as-of``) closes every period whose
end plus allowed lateness is at or before it. Which events count and which periods are released
depend on each event alone and on ``as_of``, never on other events (there is no event-time
watermark). Control records in the file are refused (``control_on_input``).

Writes into an output directory: ``releases.jsonl``, ``consistent.jsonl``, ``dead_letter.jsonl``
(protected like the input: it holds raw records), ``ledger.jsonl`` (the durable budget ledger,
fsync'ed before any release depending on it) and ``snapshot.json`` (the final engine state;
protected: it holds open-period counts). After the release, a final consistent revision gives
every released period its consistent value (revisions publish each period once: a period's
consistent value never changes).
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from streamdp.engine.bounded_lines import Overlong, bounded_lines
from streamdp.engine.engine import Engine
from streamdp.engine.events import MAX_RECORD_BYTES, too_large_message
from streamdp.engine.ledger import JsonLinesLedgerBackend
from streamdp.engine.protected_files import PROTECTED_DIRECTORY_MODE, open_protected
from streamdp.engine.records import ConsistentRecord, DeadLetterRecord, ReleaseRecord
from streamdp.engine.replay_input import events_start
from streamdp.engine.sinks import FILE_OF_KIND, JsonLinesDirectorySink, RecordSink, write_all
from streamdp.engine.spec import EngineSpec
from streamdp.errors import ConfigError
from streamdp.noise.sampler import NoiseSampler

OUTPUT_FILES = tuple(FILE_OF_KIND.values())
LEDGER_FILE = "ledger.jsonl"
SNAPSHOT_FILE = "snapshot.json"
#: Every file a replay writes into its output directory (the dead letters, the ledger and the
#: snapshot are protected like the input: nothing may publish them).
REPLAY_OUTPUT_FILES = (*OUTPUT_FILES, LEDGER_FILE, SNAPSHOT_FILE)


@dataclass
class ReplaySummary:
    """What a replay did (record counts and epsilon, never data counts)."""

    lines: int = 0
    accepted: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    periods_released: dict[str, int] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    epsilon_spent: dict[str, Decimal] = field(default_factory=dict)
    epsilon_caps: dict[str, Decimal] = field(default_factory=dict)
    # source -> "epsilon" or "rho" (a zCDP source's spend and cap are rho)
    units: dict[str, str] = field(default_factory=dict)
    # stream -> the source it reads
    sources: dict[str, str] = field(default_factory=dict)
    # stream -> per what its guarantee holds ("event", "patient_id per epoch")
    protects: dict[str, str] = field(default_factory=dict)
    # stream -> the epochs it released (spent its budget on) and its spend summed over them,
    # in its source's unit: both follow from the spec and --as-of alone (public)
    epochs_released: dict[str, int] = field(default_factory=dict)
    summed_spend: dict[str, Decimal] = field(default_factory=dict)
    # stream -> records dropped as beyond their privacy unit's bounds (an input count)
    dropped_over_unit_bound: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def render(self, *, show_counts: bool = False) -> str:
        """A short human-readable report. Record counts (lines, accepted, rejected by reason)
        and the run time (it grows with the records read) are derived from the raw input and
        shown only with ``show_counts``."""
        lines: list[str] = []
        if show_counts:
            rejected = sum(self.rejected_by_reason.values())
            lines += [
                f"replayed in {self.seconds:.2f} s",
                f"lines read: {self.lines}",
                f"events accepted: {self.accepted}",
                f"dead letters: {rejected} (one per stream refusing a record)",
            ]
            lines += [f"  {reason}: {n}" for reason, n in sorted(self.rejected_by_reason.items())]
            lines += [
                f"records dropped beyond the privacy unit's bounds in {name}: {n}"
                for name, n in sorted(self.dropped_over_unit_bound.items())
            ]
        else:
            lines.append(
                "record counts and run time hidden (derived from raw input; --show-counts "
                "prints them)"
            )
        lines.append("periods released:")
        lines += [
            f"  {name}: {n} (revisions: {self.revisions.get(name, 0)}) in "
            f"{self.epochs_released.get(name, 0)} epoch(s); {self.stream_unit(name)} summed "
            f"over the epochs: {self.summed_spend.get(name, Decimal(0))}"
            for name, n in self.periods_released.items()
        ]
        units = {name: p for name, p in self.protects.items() if p != "event"}
        if units:
            lines.append("protected per privacy unit (the budget holds per unit per epoch):")
            lines += [f"  {name}: per {p}" for name, p in units.items()]
        lines.append(
            "budget spent per source (per epoch of each stream; for a privacy unit, a unit's "
            "loss is the sum over the epochs it appears in):"
            if units
            else "budget spent per source (event level):"
        )
        lines += [
            f"  {name}: {self.units.get(name, 'epsilon')} {spent} of cap {self.epsilon_caps[name]}"
            for name, spent in self.epsilon_spent.items()
        ]
        return "\n".join(lines)

    def stream_unit(self, stream: str) -> str:
        """``"epsilon"`` or ``"rho"``: the unit of ``stream``'s source."""
        return self.units.get(self.sources.get(stream, ""), "epsilon")

    def many_epochs(self) -> dict[str, int]:
        """The streams that released more than one epoch, with their number of epochs."""
        return {name: n for name, n in self.epochs_released.items() if n > 1}


class _Progress:
    """A self-written progress bar on stderr, drawn only when stderr is a terminal (never
    decided by the input's size, which is raw data; the bar's pace still reflects it: an
    operator's view, like ``--show-counts``)."""

    def __init__(self, total_bytes: int, stream: IO[str]) -> None:
        self.total = max(total_bytes, 1)
        self.stream = stream
        self.enabled = stream.isatty()
        self._last = 0.0

    def update(self, done: int) -> None:
        """Show the fraction of the file's bytes read: no record count (the counts are derived
        from raw input and shown only with ``--show-counts``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.2:
            return
        self._last = now
        fraction = min(done / self.total, 1.0)
        width = 30
        filled = int(fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {fraction:6.1%} of the input read")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def replay(
    spec: EngineSpec,
    input_path: str | Path,
    output_dir: str | Path,
    *,
    as_of: float,
    sampler: NoiseSampler,
    progress: IO[str] | None = None,
    sink: RecordSink | None = None,
    unit_key: bytes | None = None,
) -> ReplaySummary:
    """Run the engine over ``input_path`` as one batch, release every period due at the public
    instant ``as_of``, and write the outputs into ``output_dir`` (or into ``sink``: the ledger
    and the snapshot still go to ``output_dir``). The sink is closed before this returns.

    Refuses an output directory that already holds a ledger: replaying the same data again with
    fresh noise would spend the budget a second time. ``unit_key``: the secret key privacy-unit
    identifiers are hashed under (None: a one-off random key; the snapshot then restores
    nowhere, which is safe, never lax).
    """
    source = Path(input_path)
    if not source.is_file():
        raise ConfigError(f"--input {str(source)!r} is not a readable file")
    start = events_start(source)  # refuses a file named as another format (never by a record)
    out = Path(output_dir)
    try:
        out.mkdir(mode=PROTECTED_DIRECTORY_MODE, parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(
            f"--output-dir {str(out)!r} exists and is not a directory; give a new directory"
        ) from None
    except OSError as error:
        raise ConfigError(
            f"--output-dir {str(out)!r} cannot be created: {error.strerror}; give a directory "
            "you can write to"
        ) from None
    ledger_path = out / LEDGER_FILE
    if ledger_path.exists() and ledger_path.stat().st_size > 0:
        raise ConfigError(
            f"{str(ledger_path)!r} already exists: this directory holds an earlier release. "
            "Replaying again would draw fresh noise for the same data and spend the budget "
            "twice. A new --output-dir starts an empty ledger, so the same events replayed "
            "there are a second release whose loss adds to this one's: use one only if this "
            "directory's output was never published, and delete this one (docs/operating.md, "
            "section 9)"
        )
    site = [name for name in ("index.html", "feed.json", "version.json") if (out / name).exists()]
    if site:
        raise ConfigError(
            f"--output-dir {str(out)!r} holds a feed site ({site[0]}): a replay writes protected "
            "files (the ledger, the snapshot, the dead letters) that must not sit in a published "
            "directory; give a directory of its own"
        )
    earlier = [name for name in REPLAY_OUTPUT_FILES if (out / name).exists()]
    if earlier:
        raise ConfigError(
            f"--output-dir {str(out)!r} already holds {earlier[0]} of an earlier replay "
            "(without its ledger); a replay would overwrite it: give a new directory, or "
            "delete that one if its output was never published"
        )
    engine = Engine(
        spec,
        sampler=sampler,
        ledger_backend=JsonLinesLedgerBackend(ledger_path),
        batch=True,
        unit_key=unit_key if unit_key is not None else secrets.token_bytes(32),
        stores_nodes=False,  # past epochs' nodes are dropped once no revision reads them
    )
    engine.start_batch(as_of)
    bar = _Progress(source.stat().st_size, progress if progress is not None else sys.stderr)
    started = time.perf_counter()
    outputs = JsonLinesDirectorySink(out) if sink is None else sink
    try:
        with source.open("rb") as handle:
            handle.seek(start)
            summary = ingest_lines(engine, handle, outputs, bar)
        write_all(outputs, engine.advance_clock(as_of))
        # a final revision, so that every released period has a consistent value too
        for name in spec.streams:
            write_all(outputs, engine.revise(name))
    finally:
        outputs.close()
        bar.finish()
    with open_protected(out / SNAPSHOT_FILE) as snapshot:
        snapshot.write(json.dumps(engine.snapshot()))
    summary.seconds = time.perf_counter() - started
    summary.accepted = engine.stats.events_accepted
    summary.rejected_by_reason = dict(engine.stats.rejected_by_reason)
    summary.periods_released = {n: engine.stats.periods_released.get(n, 0) for n in spec.streams}
    summary.revisions = {n: engine.stats.revisions.get(n, 0) for n in spec.streams}
    summary.epsilon_spent = engine.epsilon_spent()
    summary.epsilon_caps = {n: s.cap for n, s in spec.sources.items()}
    summary.units = dict(engine.ledger.units)
    summary.protects = {name: s.protects for name, s in spec.streams.items()}
    summary.sources = {name: s.source for name, s in spec.streams.items()}
    summary.epochs_released = dict.fromkeys(spec.streams, 0)
    summary.summed_spend = dict.fromkeys(spec.streams, Decimal(0))
    for entry in engine.ledger.entries:
        summary.epochs_released[entry.stream] += 1
        summary.summed_spend[entry.stream] += entry.amount
    summary.dropped_over_unit_bound = dict(engine.stats.dropped_over_unit_bound)
    return summary


def ingest_lines(
    engine: Engine,
    handle: IO[bytes],
    sink: RecordSink | None = None,
    bar: _Progress | None = None,
) -> ReplaySummary:
    """Judge every non-blank line of a replay's input (read from ``handle``'s position,
    numbered from 1 as its offset), writing the dead letters to ``sink``; the replay and
    ``--check-input`` both read a file this way, so the check counts what the replay counts.
    Only ``lines`` of the summary is set. No line is held whole beyond what a record may be
    (:mod:`streamdp.engine.bounded_lines`): an overlong one is judged by its first bytes
    (``too_large``), its dead letter giving the whole line's length and digest."""
    summary = ReplaySummary()
    done = 0
    for number, line in enumerate(bounded_lines(handle, MAX_RECORD_BYTES), start=1):
        if type(line) is bytes:  # the common case, as a file's own iteration gives it
            done += len(line)
            if not line.strip():
                continue
            summary.lines += 1
            letters = engine.ingest(line.rstrip(b"\r\n"), offset=number).dead_letters
        else:
            assert isinstance(line, Overlong)
            done += line.bytes_read
            if line.blank:
                continue
            summary.lines += 1
            letters = tuple(
                replace(
                    letter,
                    message=too_large_message(line.length),
                    raw_length=line.length,
                    raw_sha256=line.sha256,
                    raw_truncated=True,
                )
                for letter in engine.ingest(line.head, offset=number).dead_letters
            )
        if sink is not None:
            write_all(sink, letters)
        if bar is not None and number % 4096 == 0:
            bar.update(done)
    return summary


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every JSON object of a JSON-lines file (tests and tools)."""
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


__all__ = [
    "OUTPUT_FILES",
    "REPLAY_OUTPUT_FILES",
    "ConsistentRecord",
    "DeadLetterRecord",
    "ReleaseRecord",
    "ReplaySummary",
    "read_jsonl",
    "replay",
]
