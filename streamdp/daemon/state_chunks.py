"""State writes whose size grows with a stream's counters, cut into records of bounded size.

Two writes of a source's checkpoint hold every counter of a stream (issue 29: a places stream
can have 10^5 counters and more), and a producer refuses a record over its request limit
(``STREAMDP_MAX_REQUEST_SIZE``, Kafka's default 1,000,000 bytes):

- **the hot state** (open-period counts and pending node sums: rows of ``width`` integers), which
  every checkpoint rewrites. Up to :data:`HOT_INLINE_BYTES` of JSON it stays one record under
  the source's key. A longer one is stored as a *generation*: its JSON text cut into pieces of
  at most :data:`HOT_PIECE_BYTES` under ``<source>|hot|<generation>|<piece>``, then, last, the
  source's key holding only :func:`hot_head` ``{"hot_pieces": [generation, pieces]}``.
  Generations only grow (a loaded source continues above every generation found in the table),
  so a new generation's pieces never overwrite a stored one's: a crash between them leaves the
  previous head naming the previous generation, whose pieces are intact. A load therefore uses
  all the pieces of the generation its head names, or refuses (:class:`StateError`) if one is
  missing; it never mixes generations. The pieces of the generation a head replaced are deleted
  once that head is stored (the commit's clean-up step), and pieces a crash left of any other
  generation when the source is next loaded.
- **a noisy node** (``width`` integers), written once and never changed. Over
  :data:`NODE_PART_VALUES` values it is stored as parts ``<source>|nodepart|<stream>|<epoch>|
  <t>|<part>``, then, last, the node's key holding only :func:`node_head` ``{"parts": n,
  "width": w}``. A crash between the parts leaves no node key, so the node was never stored:
  nothing published used it (a checkpoint's writes become durable in order and its outbox
  records come after its nodes), it is drawn afresh when its period closes again, and its parts
  are overwritten then.

Every size here is a bound by construction (:data:`MAX_HOT_PIECE_BYTES`,
:data:`MAX_NODE_PART_BYTES`), listed in :data:`streamdp.daemon.settings.WRITE_BOUNDS`. The state
table's values are serialized by Faust's JSON codec, which is orjson's ``dumps`` with
``OPT_NON_STR_KEYS`` (``tests/test_state_chunks.py`` checks it): :func:`encoded_size` measures
exactly that. Plain data and pure functions; the keys are in :mod:`streamdp.daemon.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from streamdp.errors import StateError

#: What to do when the stored state is damaged (every refusal to restore ends with it). An older
#: copy of the state topic is no cure: it would release periods already published again, with
#: new noise. The worker refuses one when input records were committed after it (its applied
#: offsets are behind the group's commits: streamdp.daemon.resume_check), but not one that only
#: missed closes the clock made while no record arrived.
RESTORE_ADVICE = (
    "restore the state topic only from a copy taken while every worker was stopped, after "
    "their last commit (an older copy would release published periods again with new noise; "
    "it is refused when input was committed or periods were closed after it), or start "
    "afresh under a new --app-id"
)

#: The longest hot state kept in one record, bytes of its JSON.
HOT_INLINE_BYTES = 250_000
#: The most bytes of a longer hot state's JSON text one piece holds (cut between characters).
HOT_PIECE_BYTES = 250_000
#: One stored piece: a JSON string of those bytes, each ``"`` or ``\\`` escaped as two.
MAX_HOT_PIECE_BYTES = 2 * HOT_PIECE_BYTES + 2
#: The most values of a noisy node one record holds (one part, or the whole node).
NODE_PART_VALUES = 4_096
#: A JSON integer of the state (an int64: the counters' arrays are, and orjson refuses wider)
#: takes at most 20 characters, and a separator at most 2 more.
MAX_INT_BYTES = 22
#: One stored node or node part: a JSON list of at most :data:`NODE_PART_VALUES` integers.
MAX_NODE_PART_BYTES = NODE_PART_VALUES * MAX_INT_BYTES + 2
#: The key of a hot-state head's one field.
HOT_HEAD_FIELD = "hot_pieces"


def encode(value: Any) -> bytes:
    """``value`` as the state table stores it (Faust's JSON codec: orjson, non-str keys)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as the state table stores it."""
    return len(encode(value))


# ---------------------------------------------------------------------------- the hot state
def hot_pieces(hot: Any) -> list[str] | None:
    """A hot state's JSON text cut into pieces of at most :data:`HOT_PIECE_BYTES` bytes
    (between characters; their concatenation is the text), or None when the whole state is at
    most :data:`HOT_INLINE_BYTES` bytes and is stored as one record."""
    data = encode(hot)
    if len(data) <= HOT_INLINE_BYTES:
        return None
    return text_pieces(data, HOT_PIECE_BYTES)


def text_pieces(data: bytes, size: int) -> list[str]:
    """UTF-8 ``data`` cut into strings of at most ``size`` bytes each (``size`` >= 4), never
    inside a character."""
    if size < 4:
        raise ValueError(f"a piece must hold at least one character (4 bytes), got {size}")
    pieces: list[str] = []
    start = 0
    while start < len(data):
        stop = min(start + size, len(data))
        while stop < len(data) and data[stop] & 0xC0 == 0x80:  # inside a character
            stop -= 1
        pieces.append(data[start:stop].decode("utf-8"))
        start = stop
    return pieces


def hot_head(generation: int, pieces: int) -> dict[str, list[int]]:
    """What the source's key holds when its hot state is stored in pieces."""
    return {HOT_HEAD_FIELD: [generation, pieces]}


def parse_hot_head(value: Any) -> tuple[int, int] | None:
    """``(generation, pieces)`` of a :func:`hot_head`; None for a hot state stored whole."""
    if not isinstance(value, dict) or HOT_HEAD_FIELD not in value:
        return None
    try:
        generation, pieces = value[HOT_HEAD_FIELD]
        return int(generation), int(pieces)
    except (TypeError, ValueError) as error:
        raise StateError(
            f"stored hot-state head has an unexpected layout ({type(error).__name__})"
        ) from None


def join_hot(source: str, head: tuple[int, int], piece: Callable[[int], Any]) -> dict[str, Any]:
    """The hot state of ``source`` whose head says ``(generation, pieces)``, read with
    ``piece(i)`` (None: missing). :class:`StateError` if a piece is missing or the text they
    make is not a hot state: a head is written only after all its pieces, so that is damage,
    never a crash's leftovers."""
    generation, count = head
    texts: list[str] = []
    for i in range(count):
        text = piece(i)
        if not isinstance(text, str):
            raise StateError(
                f"piece {i} of {count} of the stored hot state of source {source!r} "
                f"(generation {generation}) is missing; refusing to restore: {RESTORE_ADVICE}"
            )
        texts.append(text)
    try:
        hot = orjson.loads("".join(texts))
    except orjson.JSONDecodeError:
        hot = None
    if not isinstance(hot, dict):
        raise StateError(
            f"the stored hot state of source {source!r} (generation {generation}, {count} "
            "pieces) is not a JSON object; refusing to restore"
        )
    return hot


# ---------------------------------------------------------------------------- noisy nodes
def node_parts(values: list[int]) -> list[list[int]] | None:
    """A noisy node's values in parts of at most :data:`NODE_PART_VALUES` (their
    concatenation is the node), or None when the node is stored as one record."""
    size = NODE_PART_VALUES
    if len(values) <= size:
        return None
    return [values[i : i + size] for i in range(0, len(values), size)]


def node_part_count(width: int) -> int:
    """How many parts :func:`node_parts` cuts a node of ``width`` values into (0: whole)."""
    return 0 if width <= NODE_PART_VALUES else -(-width // NODE_PART_VALUES)


def node_head(parts: int, width: int) -> dict[str, int]:
    """What a node's key holds when its values are stored in parts."""
    return {"parts": parts, "width": width}


def join_node(name: str, value: Any, part: Callable[[int], Any]) -> list[int] | None:
    """The values of stored node ``name`` (for messages) from what its key holds (``value``:
    None when absent, the values themselves, or a :func:`node_head`) and ``part(i)`` (None:
    missing). :class:`StateError` if a head's parts are missing or do not make its width: a
    head is written only after its parts, so that is damage, never a crash's leftovers (and
    the node may have been published: it must not be drawn again)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return list(value)
    try:
        count, width = int(value["parts"]), int(value["width"])
    except (KeyError, TypeError, ValueError) as error:
        raise StateError(
            f"stored {name} has an unexpected layout ({type(error).__name__})"
        ) from None
    values: list[int] = []
    for i in range(count):
        stored = part(i)
        if stored is None:
            raise StateError(
                f"part {i} of {count} of stored {name} is missing; refusing to restore (a node "
                f"is never drawn twice): {RESTORE_ADVICE}"
            )
        values.extend(stored)
    if len(values) != width:
        raise StateError(
            f"the parts of stored {name} hold {len(values)} values, not its width {width}; "
            "refusing to restore"
        )
    return values
