"""Loading a source from the state table: the hot state joined with its stored nodes, epoch
noise and event ids into an engine snapshot, restored; what a crash left behind found and
reused (the outbox re-published with the same keys and values, stored nodes and epoch noise
adopted so that nothing stored is ever drawn again) or deleted (pieces of hot-state
generations other than the one the head names). See :mod:`streamdp.daemon.checkpoint` for
the keys, :mod:`streamdp.daemon.checkpoint_writer` for how they are written and
:mod:`streamdp.daemon.state_chunks` for the records a wide stream's state is cut into.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamdp.daemon.checkpoint import (
    NodeKey,
    counted_nodes,
    hot_piece_key,
    join_snapshot,
    node_key,
    node_part_key,
    noise_key,
    noise_rows,
    outbox_prefix,
    parse_hot_piece_key,
    parse_node_key,
    parse_noise_key,
    parse_seen_key,
    parse_unit_key,
    seen_key,
    unit_key,
)
from streamdp.daemon.checkpoint_writer import DAEMON_STATE_KEY, SourceSlot, node_deletes
from streamdp.daemon.outcome import BatchOutcome, Publication, StateWrite
from streamdp.daemon.state_chunks import RESTORE_ADVICE, join_hot, join_node, parse_hot_head
from streamdp.engine import Engine
from streamdp.errors import StateError


def load_slot(  # noqa: PLR0917 - one call site, positional
    table: Mapping[str, Any],
    source: str,
    engine: Engine,
    home: int,
    hot: Any,
    outcome: BatchOutcome,
) -> SourceSlot:
    """``source``'s slot around a new ``engine``: restored from its hot state ``hot`` (as read
    from ``table``) and the keys beside it, or, when ``hot`` is None, a new one homed on
    partition ``home``. Appends the re-publication of a pending outbox to ``outcome``."""
    slot = SourceSlot(engine, home)
    keys = [str(k) for k in list(table.keys())]
    counted: dict[str, dict[int, int]] = {}

    def node(stream: str, epoch: int, t: int) -> list[int] | None:
        return join_node(
            f"noisy node {t} of stream {stream!r} epoch {epoch}",
            table.get(node_key(source, stream, epoch, t)),
            lambda p: table.get(node_part_key(source, stream, epoch, t, p)),
        )

    if hot is not None:
        hot = _whole_hot(table, source, slot, hot)
        daemon = dict(hot.pop(DAEMON_STATE_KEY))
        slot.home = int(daemon["home"])
        slot.next_outbox = int(daemon["next_outbox"])
        slot.stored_noise = {
            (str(stream), int(epoch)): int(n) for stream, epoch, n in daemon.get("noise_chunks", [])
        }

        def noise(stream: str, epoch: int) -> list[list[int]] | None:
            n = slot.stored_noise.get((stream, epoch))
            return None if n is None else _noise_rows(table, source, stream, epoch, n)

        snapshot = join_snapshot(hot, node, noise)
        for key in keys:
            parsed = parse_seen_key(source, key)
            if parsed is not None:
                stream, period, chunk = parsed
                seen = (stream, period)
                slot.seen_present[seen] = max(slot.seen_present.get(seen, 0), chunk + 1)
            parsed = parse_unit_key(source, key)
            if parsed is not None:
                stream, period, chunk = parsed
                logged = (stream, period)
                slot.unit_present[logged] = max(slot.unit_present.get(logged, 0), chunk + 1)
        inline_ids = _restore_seen(table, source, slot, snapshot, daemon.get("seen_chunks", []))
        inline_units = _restore_units(table, source, slot, snapshot, daemon.get("unit_chunks", []))
        inline_noise = [
            name
            for name, state in hot["streams"].items()
            if dict(state).get("counter", {}).get("node_noise") is not None
        ]
        engine.restore(snapshot)  # what it restores counts as stored (never taken)
        engine.hand_out_again(ids_of=inline_ids, noise_of=inline_noise, units_of=inline_units)
        counted = counted_nodes(hot)
        # re-publish whatever a crash left in the outbox (same key, value and timestamp) of
        # the checkpoints the hot state includes; the records of one whose hot state was never
        # stored (a crash between its writes) were never published, and the state they came
        # from is not durable (its ledger spends neither): they are dropped, and made again,
        # identical, when the input is read again and the periods close again
        prefix = outbox_prefix(source)
        for key in sorted(k for k in keys if k.startswith(prefix)):
            pending = table.get(key)
            if pending is None:
                continue
            if _outbox_seq(key, prefix) >= slot.next_outbox:
                outcome.cleanup.append(StateWrite(slot.home, key, None))
                continue
            stamp = pending.get("timestamp")
            outcome.publications.append(
                Publication(
                    pending["topic"],
                    pending["key"],
                    pending["value"],
                    None if stamp is None else float(stamp),
                )
            )
            outcome.cleanup.append(StateWrite(slot.home, key, None))
    _forget_pieces(source, slot, keys, outcome)
    # noisy nodes a crash left stored but unreferenced (it came after the node writes,
    # before the hot state): their periods are closed again with the stored values, so no
    # node is ever drawn twice
    unreferenced: dict[NodeKey, list[int]] = {}
    oldest_held = {stream: min(epochs) for stream, epochs in counted.items() if epochs}
    for key in keys:
        parsed = parse_node_key(source, key)
        if parsed is None:
            continue
        stream, epoch, t = parsed
        if epoch < oldest_held.get(stream, 0) and stream in engine.streams:
            # an epoch the stored state retired (a crash lost the deletions that followed it)
            width = engine.streams[stream].width
            outcome.cleanup += node_deletes(source, slot.home, stream, epoch, [t], width)
            continue
        if t > counted.get(stream, {}).get(epoch, 0):
            value = node(stream, epoch, t)
            if value is not None:
                unreferenced[parsed] = value
    if unreferenced:
        engine.adopt_stored_nodes(unreferenced)  # never handed out to be written again
    # k-ary epoch noise stored for an epoch the restored state has not drawn (a crash came
    # after it was written, before the state that refers to it, or it was adopted so
    # before): an outbox record published on reload may have used it, so the epoch uses it
    # instead of drawing. Chunks a crash cut short never preceded a stored outbox record
    # (writes are made durable in order), so no release used them: that epoch's noise is
    # drawn afresh and its chunks written again. Past epochs' chunks are not read: deleted.
    held = {(name, epoch) for name, (epoch, _) in engine.epoch_noise().items()}
    current = engine.current_epochs()
    found: dict[tuple[str, int], int] = {}
    for key in keys:
        parsed_noise = parse_noise_key(source, key)
        if parsed_noise is None:
            continue
        stream, epoch, chunk = parsed_noise
        if epoch < current.get(stream, epoch):
            outcome.cleanup.append(StateWrite(slot.home, key, None))  # a past epoch's: unread
        elif epoch >= current.get(stream, epoch + 1) and (stream, epoch) not in held:
            found[(stream, epoch)] = max(found.get((stream, epoch), 0), chunk + 1)
    for (stream, epoch), n in sorted(found.items()):
        rows = _noise_rows(table, source, stream, epoch, n)
        slot.stored_noise.pop((stream, epoch), None)
        if rows is not None and engine.adopt_stored_noise(stream, epoch, rows):
            slot.stored_noise[(stream, epoch)] = n
    return slot


def _outbox_seq(key: str, prefix: str) -> int:
    """The sequence number of outbox key ``key``; :class:`StateError` if it has none."""
    try:
        return int(key[len(prefix) :])
    except ValueError:
        raise StateError(
            f"the state table holds an outbox key that streamdp never writes; refusing to "
            f"restore: {RESTORE_ADVICE}"
        ) from None


def _noise_rows(
    table: Mapping[str, Any], source: str, stream: str, epoch: int, n: int
) -> list[list[int]] | None:
    """The rows of chunks ``0..n-1`` of a stored epoch noise; None if one is missing."""
    chunks: list[Any] = []
    for chunk in range(n):
        value = table.get(noise_key(source, stream, epoch, chunk))
        if value is None:
            return None
        chunks.append(value)
    return noise_rows(chunks)


def _whole_hot(
    table: Mapping[str, Any], source: str, slot: SourceSlot, stored: Any
) -> dict[str, Any]:
    """The hot state the source's key holds (``stored``), joined from the pieces its head
    names when it was stored in pieces (then the slot's stored generation)."""
    head = parse_hot_head(stored)
    if head is None:
        return dict(stored)
    slot.hot_stored = head
    generation = head[0]
    return join_hot(source, head, lambda p: table.get(hot_piece_key(source, generation, p)))


def _forget_pieces(source: str, slot: SourceSlot, keys: list[str], outcome: BatchOutcome) -> None:
    """Delete the hot-state pieces of every generation but the stored head's (a crash left
    them: a generation cut short, or one whose deletion was lost), and continue above all of
    them, so that no piece in the table is ever overwritten."""
    current = None if slot.hot_stored is None else slot.hot_stored[0]
    highest = -1 if current is None else current
    for key in keys:
        parsed = parse_hot_piece_key(source, key)
        if parsed is None:
            continue
        highest = max(highest, parsed[0])
        if parsed[0] != current:
            outcome.cleanup.append(StateWrite(slot.home, key, None))
    slot.next_hot_generation = highest + 1


def _restore_seen(
    table: Mapping[str, Any],
    source: str,
    slot: SourceSlot,
    snapshot: dict[str, Any],
    counts: list[Any],
) -> list[str]:
    """Put the open periods' event ids, read from their chunks, back into ``snapshot``.
    Returns the streams whose hot state held its ids itself (an older layout)."""
    chunks = {(str(stream), int(period)): int(n) for stream, period, n in counts}
    inline: list[str] = []
    for name, state in snapshot["streams"].items():
        if "seen" in state:
            inline.append(name)  # a checkpoint written before the ids had keys of their own
            continue
        entries: list[list[Any]] = []
        for (stream, period), n in sorted(chunks.items()):
            if stream != name:
                continue
            ids: set[str] = set()
            for c in range(n):
                chunk = table.get(seen_key(source, stream, period, c))
                if chunk is None:
                    raise StateError(  # (no chunk number: it counts the period's records)
                        f"stored event ids of stream {stream!r} period {period} are missing "
                        "(a chunk of them); refusing to restore (duplicates could be counted)"
                    )
                ids.update(str(i) for i in chunk)
            entries.append([period, sorted(ids)])
            slot.seen_chunks[(stream, period)] = n
        state["seen"] = entries
    return inline


def _restore_units(
    table: Mapping[str, Any],
    source: str,
    slot: SourceSlot,
    snapshot: dict[str, Any],
    counts: list[Any],
) -> list[str]:
    """Put the privacy-unit admission logs, read from their chunks, back into ``snapshot``.
    Returns the streams whose hot state held its log inline (a layout this daemon does not
    write): the next checkpoint must store those logs on their own, or the restart after it
    would find only what was admitted since."""
    chunks = {(str(stream), int(period)): int(n) for stream, period, n in counts}
    inline: list[str] = []
    for name, state in snapshot["streams"].items():
        units = state.get("units")
        if units is None:
            continue
        if "admitted" in units:
            inline.append(str(name))
            continue
        admitted: list[list[Any]] = []
        for (stream, period), n in sorted(chunks.items()):
            if stream != name:
                continue
            log: list[str] = []
            for c in range(n):
                chunk = table.get(unit_key(source, stream, period, c))
                if chunk is None:
                    raise StateError(  # (no chunk number: it counts the period's records)
                        f"stored privacy-unit log of stream {stream!r} period {period} is "
                        "missing (a chunk of it); refusing to restore (units' bounds would loosen)"
                    )
                log.extend(str(d) for d in chunk)
            admitted.append([period, log])
            slot.unit_chunks[(stream, period)] = n
        units["admitted"] = admitted
    return inline
