"""How one source's engine state is laid out in the daemon's keyed state table.

An engine snapshot holds every noisy node released so far; rewriting all of them at every
checkpoint would grow without bound (and past Kafka's message size). So a source's state is
split into keys of the changelog-backed table:

``<source>``                              the *hot* state: the change set's ``hot_state`` (the
                                          engine snapshot without noisy nodes, event ids or
                                          epoch noise; how many nodes there are per stream and
                                          epoch instead), plus
                                          the daemon's own fields (home partition, outbox
                                          sequence numbers)
``<source>|hot|<g>|<p>``                  piece ``p`` of generation ``g`` of a hot state too
                                          long for one record; the source's key then holds
                                          only a head naming the generation and its pieces
                                          (:mod:`streamdp.daemon.state_chunks`)
``<source>|node|<stream>|<epoch>|<t>``    one noisy node (a list of ``width`` ints), written
                                          once, by the checkpoint of the batch that drew it
                                          (the change set's ``new_nodes``), never changed; a
                                          node wider than ``NODE_PART_VALUES`` holds a head,
                                          written after its parts
``<source>|nodepart|<stream>|<epoch>|<t>|<p>``
                                          part ``p`` of such a wide node
``<source>|noise|<stream>|<epoch>|<c>``   chunk ``c`` of a k-ary stream's node noise for one
                                          epoch (rows of ``width`` ints, at most
                                          :data:`NOISE_CHUNK_VALUES` values a chunk; rows
                                          wider than that as segments of one row, see
                                          :func:`noise_chunks`), written
                                          once, by the checkpoint of the batch that drew it
                                          (before anything released with it is published),
                                          and never changed; the hot state names how many
                                          chunks the current epoch has
``<source>|out|<seq>``                    one output record waiting to be (re)published: the
                                          outbox, deleted after its publication is acknowledged
``<source>|seen|<stream>|<j>|<n>``        chunk ``n`` of the event ids counted in open period
                                          ``j`` (the ids added since the previous checkpoint);
                                          the hot state names how many chunks of each open
                                          period are valid, and a closed period's chunks are
                                          deleted once the checkpoint that closed it is stored
``<source>|unit|<stream>|<j>|<n>``        chunk ``n`` of period ``j``'s privacy-unit admission
                                          log (keyed digests of the units counted, one per
                                          record, added since the previous checkpoint); kept
                                          for every period of an epoch not yet ended (a unit's
                                          periods count against its bound until then), the
                                          hot state naming how many chunks are valid, and
                                          deleted once the checkpoint that ended the epoch is
                                          stored

Keeping the event ids out of the hot state keeps it small and constant in size: one period of
a busy source holds tens of thousands of ids, more than Kafka's default 1 MB message limit, and
rewriting them all at every checkpoint would cost time proportional to the period's volume.
Likewise a checkpoint writes only the nodes drawn since the previous one and a hot state built
without walking the nodes, so its cost does not grow with the periods closed (issue 15); only
loading a source reads every stored node back (:func:`join_snapshot`).

Each checkpoint lays out one :class:`~streamdp.engine.changes.ChangeSet` (what the engine's
step changed, from ``Engine.take_changes()``) in these keys. Everything here is plain data and
pure functions; the Faust adapter only moves the pairs.
The table holds raw partial sums and raw input (dead letters in the outbox), so its changelog
topic must be protected like the input topics.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.daemon.state_chunks import RESTORE_ADVICE
from streamdp.errors import StateError

NodeKey = tuple[str, int, int]  # (stream, epoch, t) with t the 1-based node index
SEPARATOR = "|"
#: Most noise values in one ``noise`` chunk. The census stream (width 355, N = 4095, 4,506
#: nodes) needs 98 chunks of 46 rows.
NOISE_CHUNK_VALUES = 16_384
#: The encoded size bound of one noise chunk: an int64 value is at most 20 characters, with its
#: separator 22, and each row (at most one per value) adds its brackets and separator, 4 more.
MAX_NOISE_CHUNK_BYTES = NOISE_CHUNK_VALUES * 26 + 2


def hot_key(source: str) -> str:
    """Table key of a source's hot state."""
    return source


def hot_piece_key(source: str, generation: int, piece: int) -> str:
    """Table key of one piece of a hot state stored in pieces."""
    return SEPARATOR.join((source, "hot", str(generation), str(piece)))


def parse_hot_piece_key(source: str, key: str) -> tuple[int, int] | None:
    """``(generation, piece)`` of a :func:`hot_piece_key` of ``source``; None for other keys."""
    prefix = f"{source}{SEPARATOR}hot{SEPARATOR}"
    if not key.startswith(prefix):
        return None
    generation, _, piece = key[len(prefix) :].partition(SEPARATOR)
    if not (generation.isdigit() and piece.isdigit()):
        return None
    return int(generation), int(piece)


def node_part_key(source: str, stream: str, epoch: int, t: int, part: int) -> str:
    """Table key of one part of a noisy node stored in parts."""
    return SEPARATOR.join((source, "nodepart", stream, str(epoch), str(t), str(part)))


def node_key(source: str, stream: str, epoch: int, t: int) -> str:
    """Table key of one noisy node."""
    return f"{source}{SEPARATOR}node{SEPARATOR}{stream}{SEPARATOR}{epoch}{SEPARATOR}{t}"


def _parse_entry(source: str, kind: str, key: str) -> tuple[str, int, int] | None:
    """``(stream, a, b)`` of a key ``<source>|<kind>|<stream>|<a>|<b>``; None for others."""
    prefix = f"{source}{SEPARATOR}{kind}{SEPARATOR}"
    if not key.startswith(prefix):
        return None
    try:
        stream, a, b = key[len(prefix) :].rsplit(SEPARATOR, 2)
        return stream, int(a), int(b)
    except ValueError:
        raise StateError(
            f"the state table holds a {kind} key of source {source!r} that streamdp never "
            f"writes; refusing to restore: {RESTORE_ADVICE}"
        ) from None


def parse_node_key(source: str, key: str) -> NodeKey | None:
    """``(stream, epoch, t)`` of a :func:`node_key` of ``source``; None for other keys."""
    return _parse_entry(source, "node", key)


def noise_key(source: str, stream: str, epoch: int, chunk: int) -> str:
    """Table key of one chunk of a k-ary stream's epoch noise."""
    return SEPARATOR.join((source, "noise", stream, str(epoch), str(chunk)))


def parse_noise_key(source: str, key: str) -> NodeKey | None:
    """``(stream, epoch, chunk)`` of a :func:`noise_key` of ``source``; None for other keys."""
    return _parse_entry(source, "noise", key)


def noise_chunks(noise: npt.NDArray[np.int64]) -> list[Any]:
    """An epoch's node noise ``(nodes, width)`` as bounded chunks of at most
    :data:`NOISE_CHUNK_VALUES` values each (:func:`noise_rows` joins them): whole rows, or,
    for rows wider than that, ``{"width": width, "values": [...]}`` segments of the rows in
    order."""
    width = max(1, noise.shape[1])
    if width > NOISE_CHUNK_VALUES:
        flat = noise.reshape(-1).tolist()
        return [
            {"width": width, "values": flat[i : i + NOISE_CHUNK_VALUES]}
            for i in range(0, len(flat), NOISE_CHUNK_VALUES)
        ]
    rows = NOISE_CHUNK_VALUES // width
    values = noise.tolist()
    return [values[i : i + rows] for i in range(0, len(values), rows)]


def noise_rows(chunks: list[Any]) -> list[list[int]] | None:
    """The noise rows of an epoch's stored chunks, in order (:func:`noise_chunks`); None if
    segments do not make whole rows (a set a crash cut short: never adopted, never restored)."""
    rows: list[list[int]] = []
    flat: list[int] = []
    width = 0
    for chunk in chunks:
        if isinstance(chunk, dict):
            width = int(chunk["width"])
            flat.extend(chunk["values"])
        else:
            rows.extend(list(r) for r in chunk)
    if flat:
        if len(flat) % width:
            return None
        rows.extend(flat[i : i + width] for i in range(0, len(flat), width))
    return rows


def outbox_key(source: str, seq: int) -> str:
    """Table key of one pending output record (zero-padded so keys sort by sequence)."""
    return f"{source}{SEPARATOR}out{SEPARATOR}{seq:012d}"


def seen_key(source: str, stream: str, period: int, chunk: int) -> str:
    """Table key of one chunk of an open period's event ids."""
    return SEPARATOR.join((source, "seen", stream, str(period), str(chunk)))


def parse_seen_key(source: str, key: str) -> tuple[str, int, int] | None:
    """``(stream, period, chunk)`` of a :func:`seen_key` of ``source``; None for other keys."""
    return _parse_entry(source, "seen", key)


def unit_key(source: str, stream: str, period: int, chunk: int) -> str:
    """Table key of one chunk of a period's privacy-unit admission log."""
    return SEPARATOR.join((source, "unit", stream, str(period), str(chunk)))


def parse_unit_key(source: str, key: str) -> tuple[str, int, int] | None:
    """``(stream, period, chunk)`` of a :func:`unit_key` of ``source``; None for other keys."""
    return _parse_entry(source, "unit", key)


def outbox_prefix(source: str) -> str:
    """Prefix of every outbox key of ``source``."""
    return f"{source}{SEPARATOR}out{SEPARATOR}"


def counted_nodes(hot: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """Per stream, ``epoch -> nodes`` that a hot state's ``node_counts`` runs refer to (read at
    load: a stored node beyond them was left by a checkpoint that never completed).
    :class:`StateError` if the layout is not a hot state's."""
    out: dict[str, dict[int, int]] = {}
    try:
        for name, state in hot["streams"].items():
            out[str(name)] = {
                int(run[0]) + k: int(run[1])
                for run in state["node_counts"]
                for k in range(int(run[2]) if len(run) > 2 else 1)
            }
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise StateError(
            f"stored hot state has an unexpected layout ({type(error).__name__})"
        ) from None
    return out


def join_snapshot(
    hot: Mapping[str, Any],
    node: Callable[[str, int, int], list[int] | None],
    noise: Callable[[str, int], list[list[int]] | None] | None = None,
) -> dict[str, Any]:
    """Rebuild the full engine snapshot (``Engine.snapshot()``, seen ids aside) from the hot
    part (a change set's ``hot_state``) and
    lookups of stored nodes and of stored epoch noise (``(stream, epoch)`` -> rows, for a
    k-ary counter whose state says its noise was drawn). Raises :class:`StateError` if a node
    or noise is missing (never redraws)."""
    snapshot = copy.deepcopy(dict(hot))
    try:
        for name, state in snapshot["streams"].items():
            counter = state["counter"]
            if counter.get("noise_drawn") and counter.get("node_noise") is None:
                epoch = int(counter["epoch"])
                rows = None if noise is None else noise(name, epoch)
                if rows is None:
                    raise StateError(
                        f"stored node noise of stream {name!r} epoch {epoch} is missing or "
                        "incomplete; refusing to restore (noise that releases used is never "
                        f"drawn again): {RESTORE_ADVICE}"
                    )
                counter["node_noise"] = rows
            counts = [
                (int(run[0]) + k, int(run[1]))
                for run in state.pop("node_counts")
                for k in range(int(run[2]) if len(run) > 2 else 1)
            ]
            *past_counts, (current_epoch, current_n) = counts
            past: list[list[list[int]]] = []
            for epoch, n in past_counts:
                past.append([_need(node, name, epoch, t) for t in range(1, n + 1)])
            state["past_nodes"] = past
            if int(state["counter"]["epoch"]) != current_epoch:
                raise StateError(f"stream {name!r}: node counts disagree with the counter epoch")
            state["counter"]["noisy_nodes"] = [
                _need(node, name, current_epoch, t) for t in range(1, current_n + 1)
            ]
    except StateError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise StateError(
            f"stored hot state has an unexpected layout ({type(error).__name__})"
        ) from None
    return snapshot


def _need(
    node: Callable[[str, int, int], list[int] | None], stream: str, epoch: int, t: int
) -> list[int]:
    values = node(stream, epoch, t)
    if values is None:
        raise StateError(
            f"stored noisy node {t} of stream {stream!r} epoch {epoch} is missing; refusing to "
            f"restore (a node is never drawn twice): {RESTORE_ADVICE}"
        )
    return list(values)
