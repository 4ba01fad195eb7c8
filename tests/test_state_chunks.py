"""Cutting a wide stream's state writes into bounded records and joining them again
(streamdp.daemon.state_chunks, the noise chunks of streamdp.daemon.checkpoint): every record
within its bound, the parts joined back exactly, and a torn set (a crash between its records)
never read as a whole one."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from faust.serializers import codecs

import streamdp.daemon.checkpoint as checkpoint
import streamdp.daemon.state_chunks as chunks
from streamdp.daemon.settings import RECORD_OVERHEAD_BYTES, WRITE_BOUNDS, DaemonSettings
from streamdp.errors import StateError

#: JSON the state table may hold: quotes, backslashes and characters of 2, 3 and 4 UTF-8 bytes
#: (which a cut must never split), floats orjson writes longer than Python does.
AWKWARD = {
    "streams": {
        'r\u00e9gion "\u6771\u4eac" \\ \U0001f600': {"open": [[3, [0, 12, -7] * 50]]},
        "ratio": [1e-05, 0.1, 1e16, -0.0],
    },
    "daemon": {"home": 1, "next_outbox": 7},
}


def test_the_state_table_codec_is_the_encoding_whose_size_is_bounded() -> None:
    """Faust's JSON codec (how the worker's state table serializes a value) writes exactly
    ``state_chunks.encode``: the bytes its bounds measure."""
    for value in (AWKWARD, [1, -(2**63), 2**63 - 1], 'a"b\\c\u00e9', {"parts": 3, "width": 9}):
        assert codecs.dumps("json", value) == chunks.encode(value)


@pytest.mark.parametrize("size", [4, 5, 7, 64, 1000])
def test_text_pieces_cut_between_characters_and_join_back(size: int) -> None:
    data = chunks.encode(AWKWARD)
    pieces = chunks.text_pieces(data, size)
    assert "".join(pieces).encode() == data
    for piece in pieces:
        assert 0 < len(piece.encode()) <= size
        # stored as a JSON string: at most twice its bytes (quotes, backslashes) plus quotes
        assert chunks.encoded_size(piece) <= 2 * size + 2
    with pytest.raises(ValueError, match="at least one character"):
        chunks.text_pieces(data, 3)


def test_a_small_hot_state_stays_one_record_and_a_long_one_is_cut_into_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert chunks.hot_pieces(AWKWARD) is None  # the production sizes keep it whole
    size = chunks.encoded_size(AWKWARD)
    monkeypatch.setattr(chunks, "HOT_INLINE_BYTES", size)
    assert chunks.hot_pieces(AWKWARD) is None  # exactly the inline bound: still whole
    monkeypatch.setattr(chunks, "HOT_INLINE_BYTES", size - 1)
    monkeypatch.setattr(chunks, "HOT_PIECE_BYTES", 100)
    pieces = chunks.hot_pieces(AWKWARD)
    assert pieces is not None
    assert len(pieces) >= size // 100
    assert all(chunks.encoded_size(p) <= 2 * 100 + 2 for p in pieces)
    stored = dict(enumerate(pieces))
    head = chunks.parse_hot_head(chunks.hot_head(5, len(pieces)))
    assert head == (5, len(pieces))
    assert chunks.join_hot("src", head, stored.get) == AWKWARD
    assert chunks.parse_hot_head(AWKWARD) is None  # a hot state stored whole is no head


def test_a_torn_or_damaged_set_of_hot_pieces_is_refused_never_read_short() -> None:
    pieces = chunks.text_pieces(chunks.encode(AWKWARD), 50)
    torn = dict(enumerate(pieces[:-1]))  # the last piece never written
    with pytest.raises(StateError, match=r"piece \d+ of \d+ .* source 'src' .* missing"):
        chunks.join_hot("src", (2, len(pieces)), torn.get)
    shuffled = dict(enumerate([pieces[1], pieces[0], *pieces[2:]]))
    with pytest.raises(StateError, match="not a JSON object"):
        chunks.join_hot("src", (2, len(pieces)), shuffled.get)
    with pytest.raises(StateError, match="unexpected layout"):
        chunks.parse_hot_head({chunks.HOT_HEAD_FIELD: [1]})


def test_a_wide_node_is_cut_into_parts_and_a_torn_node_is_never_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = [int(v) for v in np.random.default_rng(3).integers(-(2**62), 2**62, size=23)]
    monkeypatch.setattr(chunks, "NODE_PART_VALUES", 23)
    assert chunks.node_parts(values) is None
    monkeypatch.setattr(chunks, "NODE_PART_VALUES", 5)
    parts = chunks.node_parts(values)
    assert parts is not None
    assert [len(p) for p in parts] == [5, 5, 5, 5, 3]
    for part in parts:  # the bound holds for the widest integers
        assert chunks.encoded_size(part) <= 5 * chunks.MAX_INT_BYTES + 2
    assert chunks.encoded_size([-(2**63)] * 5) <= 5 * chunks.MAX_INT_BYTES + 2
    stored = dict(enumerate(parts))
    head = chunks.node_head(len(parts), len(values))
    assert chunks.join_node("node 1", head, stored.get) == values
    assert chunks.join_node("node 1", values, stored.get) == values  # stored whole
    # a crash between the parts leaves no head: the node was never stored
    assert chunks.join_node("node 1", None, dict(enumerate(parts[:2])).get) is None
    # a head is written after its parts: a part missing under it is damage, refused
    with pytest.raises(StateError, match=r"part 2 of 5 of stored node 1 is missing"):
        chunks.join_node("node 1", head, {0: parts[0], 1: parts[1]}.get)
    with pytest.raises(StateError, match="not its width 24"):
        chunks.join_node("node 1", chunks.node_head(5, 24), stored.get)


@pytest.mark.parametrize(("width", "values"), [(3, 7), (7, 7), (8, 7), (20, 7)])
def test_epoch_noise_rows_of_any_width_are_cut_into_bounded_chunks_and_joined_back(
    monkeypatch: pytest.MonkeyPatch, width: int, values: int
) -> None:
    monkeypatch.setattr(checkpoint, "NOISE_CHUNK_VALUES", values)
    rng = np.random.default_rng(width)
    noise = rng.integers(-(2**62), 2**62, size=(5, width)).astype(np.int64)
    stored = checkpoint.noise_chunks(noise)
    for chunk in stored:
        held = chunk["values"] if isinstance(chunk, dict) else [v for row in chunk for v in row]
        assert 0 < len(held) <= values
        assert chunks.encoded_size(chunk) <= values * 26 + 2  # MAX_NOISE_CHUNK_BYTES' sum
    stored = json.loads(json.dumps(stored))
    assert checkpoint.noise_rows(stored) == noise.tolist()
    if width > values:  # segments: a set a crash cut short is never read as whole rows
        for kept in range(1, len(stored)):
            held = sum(len(c["values"]) for c in stored[:kept])
            rows = checkpoint.noise_rows(stored[:kept])
            assert rows is None if held % width else rows == noise.tolist()[: held // width]


def test_every_bounded_write_fits_the_default_request_limit_and_the_minimum_is_checked(
    tmp_path: Any,
) -> None:
    assert WRITE_BOUNDS["piece of a hot state"] == 2 * chunks.HOT_PIECE_BYTES + 2
    assert WRITE_BOUNDS["noisy node or part of one"] == chunks.MAX_NODE_PART_BYTES
    assert WRITE_BOUNDS["chunk of a k-ary epoch's noise"] == checkpoint.MAX_NOISE_CHUNK_BYTES
    needed = max(WRITE_BOUNDS.values()) + RECORD_OVERHEAD_BYTES
    assert needed < 1_000_000
    config = tmp_path / "spec.toml"
    config.write_text("")
    DaemonSettings(config=config, max_request_size=needed).validate()
