"""The checkpoint writer: one source's :class:`~streamdp.engine.changes.ChangeSet` laid out
as state-table writes (the key layout of :mod:`streamdp.daemon.checkpoint`), in the protocol's
order: event-id chunks, a k-ary epoch's noise, new noisy nodes, the outbox records, and the hot
state last (on recovery it then refers only to what is already written). The outbox records
are deleted by the outcome's ``cleanup``, with the chunks of the periods that closed. A wide
stream's nodes and hot state are cut into bounded records (:mod:`streamdp.daemon.state_chunks`):
each node's parts before its head, the hot state's pieces before the head that names them, and
the pieces of the generation that head replaces deleted by the ``cleanup``.

O(what the batch changed), whatever the history (issue 15); nothing here reads the engine
beyond the change set it hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streamdp.daemon.checkpoint import (
    hot_key,
    hot_piece_key,
    node_key,
    node_part_key,
    noise_chunks,
    noise_key,
    outbox_key,
    seen_key,
    unit_key,
)
from streamdp.daemon.outcome import BatchOutcome, Publication, StateWrite
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.state_chunks import (
    hot_head,
    hot_pieces,
    node_head,
    node_part_count,
    node_parts,
)
from streamdp.engine import DeadLetterRecord, Engine
from streamdp.engine.changes import ChangeSet

DAEMON_STATE_KEY = "daemon"
#: Most content keys in one stored chunk (33-34 bytes each in JSON: ~560 KB, under Kafka's
#: default 1 MB message limit whatever the event ids look like).
SEEN_CHUNK_KEYS = 16_384
#: The encoded size bound of one content-key chunk: a JSON list of 32-character hex strings
#: (each at most 36 bytes with its quotes and a ", " separator).
MAX_SEEN_CHUNK_BYTES = SEEN_CHUNK_KEYS * len('"0123456789abcdef0123456789abcdef", ') + 2


class SourceSlot:
    """A loaded source: its engine and what of its state is already stored."""

    def __init__(self, engine: Engine, home: int) -> None:
        self.engine = engine
        self.home = home
        # (stream, epoch) -> chunks of the k-ary epoch noise already stored
        self.stored_noise: dict[tuple[str, int], int] = {}
        self.next_outbox = 0
        # per (stream, open period): how many chunks of its content keys are stored
        self.seen_chunks: dict[tuple[str, int], int] = {}
        # chunks found in the table at load beyond those the hot state counts (left by a
        # checkpoint that never completed): deleted with the period's own chunks
        self.seen_present: dict[tuple[str, int], int] = {}
        # the same two for the privacy-unit admission logs, per (stream, period)
        self.unit_chunks: dict[tuple[str, int], int] = {}
        self.unit_present: dict[tuple[str, int], int] = {}
        # the (generation, pieces) the stored hot state's head names (None: stored whole),
        # and the generation the next hot state in pieces takes (above every one stored)
        self.hot_stored: tuple[int, int] | None = None
        self.next_hot_generation = 0


def write_checkpoint(
    source: str,
    slot: SourceSlot,
    changes: ChangeSet,
    topics: OutputTopics,
    outcome: BatchOutcome,
) -> None:
    """Append the writes of ``source``'s checkpoint to ``outcome``: ``changes`` (the change
    set its engine handed out) laid out in keys (event ids, a k-ary epoch's noise, the nodes
    drawn since the last checkpoint, the outbox) and the hot state, last; O(batch), whatever
    the history."""
    seen_counts = _write_seen(source, slot, changes, outcome)
    unit_counts = _write_units(source, slot, changes, outcome)
    # a k-ary epoch's noise, once, by the checkpoint of the batch that drew it: before the
    # outbox records that used it and the hot state that refers to it
    for drawn in changes.new_noise:
        stream, epoch = drawn.stream, drawn.epoch
        chunks = noise_chunks(drawn.noise)
        for c, rows in enumerate(chunks):
            key = noise_key(source, stream, epoch, c)
            outcome.writes.append(StateWrite(slot.home, key, rows))
        # earlier epochs' noise: no longer read once the hot state names this epoch
        for (s, e), n in slot.stored_noise.items():
            if s == stream and e < epoch:
                outcome.cleanup += [
                    StateWrite(slot.home, noise_key(source, s, e, c), None) for c in range(n)
                ]
        slot.stored_noise = {
            (s, e): n for (s, e), n in slot.stored_noise.items() if s != stream or e > epoch
        }
        slot.stored_noise[(stream, epoch)] = len(chunks)
    for (stream, epoch, t), values in changes.new_nodes.items():
        parts = node_parts(values)
        if parts is None:
            outcome.writes.append(StateWrite(slot.home, node_key(source, stream, epoch, t), values))
            continue
        # a wide node: its parts, then its head (a crash between them leaves no node stored)
        for p, part in enumerate(parts):
            key = node_part_key(source, stream, epoch, t, p)
            outcome.writes.append(StateWrite(slot.home, key, part))
        head = node_head(len(parts), len(values))
        outcome.writes.append(StateWrite(slot.home, node_key(source, stream, epoch, t), head))
    # a tick's releases and revisions carry its public instant (dead letters: none)
    stamp = outcome.released_at
    for record in changes.outputs:
        timestamp = None if isinstance(record, DeadLetterRecord) else stamp
        publication = Publication(
            topics.for_record(record), record.key, record.to_json(), timestamp
        )
        key = outbox_key(source, slot.next_outbox)
        slot.next_outbox += 1
        pending: dict[str, Any] = {
            "topic": publication.topic,
            "key": publication.key,
            "value": publication.value,
        }
        if timestamp is not None:
            pending["timestamp"] = timestamp  # re-published after a crash with the same one
        outcome.writes.append(StateWrite(slot.home, key, pending))
        outcome.publications.append(publication)
        outcome.cleanup.append(StateWrite(slot.home, key, None))
    outcome.releases += changes.releases
    outcome.revisions += changes.revisions
    outcome.dead_letters += changes.dead_letters
    for stream, n in changes.unit_drops.items():
        outcome.unit_drops[stream] = outcome.unit_drops.get(stream, 0) + n
    outcome.periods_closed.update(changes.periods_closed)
    outcome.revision_stats.update(changes.revision_stats)
    hot = dict(changes.hot_state)
    hot[DAEMON_STATE_KEY] = {
        "home": slot.home,
        "next_outbox": slot.next_outbox,
        "seen_chunks": seen_counts,
        "noise_chunks": [[s, e, n] for (s, e), n in sorted(slot.stored_noise.items())],
    }
    if unit_counts:  # streams with a privacy unit only
        hot[DAEMON_STATE_KEY]["unit_chunks"] = unit_counts
    # the hot state goes last: on recovery it only refers to nodes already written
    _write_hot(source, slot, hot, outcome)
    # nodes of epochs the engine retired: the hot state just written no longer refers to them
    for stream, epoch, n in changes.retired_nodes:
        width = slot.engine.streams[stream].width
        outcome.cleanup += node_deletes(source, slot.home, stream, epoch, range(1, n + 1), width)


def node_deletes(  # noqa: PLR0917 - one call per stored epoch
    source: str, home: int, stream: str, epoch: int, nodes: Iterable[int], width: int
) -> list[StateWrite]:
    """Deletions of the stored nodes ``nodes`` of ``stream``'s ``epoch``: a wide node's parts
    first, then its key (a crash between them leaves the head, which the next load finds and
    deletes again with its parts)."""
    parts = node_part_count(width)
    out: list[StateWrite] = []
    for t in nodes:
        out += [
            StateWrite(home, node_part_key(source, stream, epoch, t, p), None) for p in range(parts)
        ]
        out.append(StateWrite(home, node_key(source, stream, epoch, t), None))
    return out


def _write_hot(source: str, slot: SourceSlot, hot: dict[str, Any], outcome: BatchOutcome) -> None:
    """Write the hot state whole, or as a new generation of pieces followed by the head that
    names it; delete the pieces of the generation it replaces once it is stored."""
    pieces = hot_pieces(hot)
    replaced = slot.hot_stored
    if pieces is None:
        outcome.writes.append(StateWrite(slot.home, hot_key(source), hot))
        slot.hot_stored = None
    else:
        generation = slot.next_hot_generation
        slot.next_hot_generation += 1
        for p, piece in enumerate(pieces):
            outcome.writes.append(
                StateWrite(slot.home, hot_piece_key(source, generation, p), piece)
            )
        head = hot_head(generation, len(pieces))
        outcome.writes.append(StateWrite(slot.home, hot_key(source), head))
        slot.hot_stored = (generation, len(pieces))
    if replaced is not None:
        generation, count = replaced
        outcome.cleanup += [
            StateWrite(slot.home, hot_piece_key(source, generation, p), None) for p in range(count)
        ]


def _write_seen(
    source: str, slot: SourceSlot, changes: ChangeSet, outcome: BatchOutcome
) -> list[list[Any]]:
    """Write the event ids each open period counted since the last checkpoint as new
    chunks (O(new ids)); schedule the deletion of closed periods' chunks (after the
    checkpoint is stored). Returns ``[stream, period, chunks]`` for every open period."""
    return _write_period_logs(
        PeriodLogs(
            lambda stream, period, c: seen_key(source, stream, period, c),
            slot.seen_chunks,
            slot.seen_present,
        ),
        slot.home,
        changes.open_periods,
        {key: list(ids) for key, ids in changes.new_ids.items()},
        changes.closed_periods,
        changes.periods_closed,
        outcome,
    )


def _write_units(
    source: str, slot: SourceSlot, changes: ChangeSet, outcome: BatchOutcome
) -> list[list[Any]]:
    """Write the privacy-unit digests each period admitted since the last checkpoint as new
    chunks (O(new admissions)); schedule the deletion of the logs of ended epochs (after the
    checkpoint is stored). Returns ``[stream, period, chunks]`` for every logged period."""
    return _write_period_logs(
        PeriodLogs(
            lambda stream, period, c: unit_key(source, stream, period, c),
            slot.unit_chunks,
            slot.unit_present,
        ),
        slot.home,
        changes.unit_periods,
        {key: [d.hex() for d in log] for key, log in changes.new_units.items()},
        changes.ended_unit_periods,
        changes.periods_closed,
        outcome,
    )


@dataclass(frozen=True)
class PeriodLogs:
    """One kind of append-only per-(stream, period) log in the state table: its chunk keys,
    the chunks stored per period, and those found at load beyond them."""

    key_of: Callable[[str, int, int], str]
    stored: dict[tuple[str, int], int]
    present: dict[tuple[str, int], int]


def _write_period_logs(  # noqa: PLR0917 - one call per kind of log
    logs: PeriodLogs,
    home: int,
    periods: tuple[tuple[str, int], ...],
    new: dict[tuple[str, int], list[str]],
    dropped: tuple[tuple[str, int], ...],
    periods_closed: Mapping[str, int],
    outcome: BatchOutcome,
) -> list[list[Any]]:
    """Write each period's new entries as new chunks of at most :data:`SEEN_CHUNK_KEYS` (each
    entry a 32-character hex digest, so no chunk nears the producer's message size limit);
    schedule the deletion of ``dropped`` periods' chunks and of chunks an incomplete checkpoint
    left in closed periods. Returns ``[stream, period, chunks]`` for every period in
    ``periods``."""
    counts: list[list[Any]] = []
    for key in periods:
        stream, period = key
        n = logs.stored.get(key, 0)
        entries = new.get(key)
        if entries is not None:
            for first in range(0, len(entries), SEEN_CHUNK_KEYS):
                part = entries[first : first + SEEN_CHUNK_KEYS]
                outcome.writes.append(StateWrite(home, logs.key_of(stream, period, n), part))
                n += 1
            logs.stored[key] = n
        counts.append([stream, period, n])
    gone = set(dropped)
    for key in logs.present.keys() - set(periods):
        closed = periods_closed.get(key[0])
        if closed is None or key[1] < closed:
            gone.add(key)
        # else: left by an incomplete checkpoint for a period not yet open: rewritten
    for key in gone:
        n = max(logs.stored.pop(key, 0), logs.present.pop(key, 0))
        outcome.cleanup += [
            StateWrite(home, logs.key_of(key[0], key[1], c), None) for c in range(n)
        ]
    return counts
