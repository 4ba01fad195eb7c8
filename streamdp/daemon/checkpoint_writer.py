"""The checkpoint writer: one source's :class:`~streamdp.engine.changes.ChangeSet` laid out
as state-table writes (the key layout of :mod:`streamdp.daemon.checkpoint`), in the protocol's
order: event-id chunks, a k-ary epoch's noise, new noisy nodes, the outbox records, and the hot
state last (on recovery it then refers only to what is already written). The outbox records
are deleted by the outcome's ``cleanup``, with the chunks of the periods that closed.

O(what the batch changed), whatever the history (issue 15); nothing here reads the engine
beyond the change set it hands out.
"""

from __future__ import annotations

from typing import Any

from streamdp.daemon.checkpoint import (
    hot_key,
    node_key,
    noise_chunks,
    noise_key,
    outbox_key,
    seen_key,
    unit_key,
)
from streamdp.daemon.outcome import BatchOutcome, Publication, StateWrite
from streamdp.daemon.routing import OutputTopics
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
        slot.stored_noise = {
            (s, e): n for (s, e), n in slot.stored_noise.items() if s != stream or e > epoch
        }
        slot.stored_noise[(stream, epoch)] = len(chunks)
    for (stream, epoch, t), values in changes.new_nodes.items():
        outcome.writes.append(StateWrite(slot.home, node_key(source, stream, epoch, t), values))
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
    outcome.writes.append(StateWrite(slot.home, hot_key(source), hot))


def _write_seen(
    source: str, slot: SourceSlot, changes: ChangeSet, outcome: BatchOutcome
) -> list[list[Any]]:
    """Write the event ids each open period counted since the last checkpoint as new
    chunks (O(new ids)); schedule the deletion of closed periods' chunks (after the
    checkpoint is stored). Returns ``[stream, period, chunks]`` for every open period."""
    counts: list[list[Any]] = []
    for key in changes.open_periods:
        stream, period = key
        n = slot.seen_chunks.get(key, 0)
        new = changes.new_ids.get(key)
        if new is not None:
            # bounded chunks: a content key is a 32-character digest whatever the record,
            # so no chunk nears the producer's message size limit
            for first in range(0, len(new), SEEN_CHUNK_KEYS):
                part = list(new[first : first + SEEN_CHUNK_KEYS])
                outcome.writes.append(
                    StateWrite(slot.home, seen_key(source, stream, period, n), part)
                )
                n += 1
            slot.seen_chunks[key] = n
        counts.append([stream, period, n])
    still_open = set(changes.open_periods)
    gone = set(changes.closed_periods)
    for key in slot.seen_present.keys() - still_open:
        closed = changes.periods_closed.get(key[0])
        if closed is None or key[1] < closed:
            gone.add(key)
        # else: left by an incomplete checkpoint for a period not yet open: rewritten
    for key in gone:
        n = max(slot.seen_chunks.pop(key, 0), slot.seen_present.pop(key, 0))
        outcome.cleanup += [
            StateWrite(slot.home, seen_key(source, key[0], key[1], c), None) for c in range(n)
        ]
    return counts


def _write_units(
    source: str, slot: SourceSlot, changes: ChangeSet, outcome: BatchOutcome
) -> list[list[Any]]:
    """Write the privacy-unit digests each period admitted since the last checkpoint as new
    chunks (O(new admissions)); schedule the deletion of the logs of ended epochs (after the
    checkpoint is stored). Returns ``[stream, period, chunks]`` for every logged period."""
    counts: list[list[Any]] = []
    for key in changes.unit_periods:
        stream, period = key
        n = slot.unit_chunks.get(key, 0)
        new = changes.new_units.get(key)
        if new is not None:
            for first in range(0, len(new), SEEN_CHUNK_KEYS):
                part = [digest.hex() for digest in new[first : first + SEEN_CHUNK_KEYS]]
                outcome.writes.append(
                    StateWrite(slot.home, unit_key(source, stream, period, n), part)
                )
                n += 1
            slot.unit_chunks[key] = n
        counts.append([stream, period, n])
    logged = set(changes.unit_periods)
    gone = set(changes.ended_unit_periods)
    for key in slot.unit_present.keys() - logged:
        closed = changes.periods_closed.get(key[0])
        if closed is None or key[1] < closed:
            gone.add(key)  # left by an incomplete checkpoint, in a closed period: unreferenced
    for key in gone:
        n = max(slot.unit_chunks.pop(key, 0), slot.unit_present.pop(key, 0))
        outcome.cleanup += [
            StateWrite(slot.home, unit_key(source, key[0], key[1], c), None) for c in range(n)
        ]
    return counts
