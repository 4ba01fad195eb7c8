"""A places stream whose hot state and noisy nodes are stored in pieces and parts (issue 29,
streamdp.daemon.state_chunks), through the release service on a dict table, with the sizes
lowered so that the small county fixture (38 counters) is cut up as a 10^5-counter stream is
at the production sizes.

What these tests prove: every write stays within its (lowered) bound; a worker that crashes
between the pieces of a hot state, between the parts of a node, or before the previous
generation's pieces are deleted, and restarts on the same input, publishes exactly what an
uninterrupted run publishes, draws again only a node the crash kept from being stored, keeps
the table restorable after every step, and ends with the pieces of one generation only. A k-ary
stream whose noise rows are wider than a noise chunk stores them as segments and survives the
protocol's crashes the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import test_daemon_service as protocol
from places_fixture import small_county_spec
from service_steps import apply_writes
from test_engine_support import arrivals_following

import streamdp.daemon.checkpoint as checkpoint
import streamdp.daemon.checkpoint_writer as writer
import streamdp.daemon.state_chunks as chunks
from streamdp.daemon.checkpoint import parse_hot_piece_key
from streamdp.daemon.outcome import StateWrite
from streamdp.daemon.routing import InputRecord, OutputTopics
from streamdp.daemon.service import ReleaseService
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import generate, release_instant

TOPICS = OutputTopics()
SOURCE = "admissions"
PERIODS = 12
BATCH = 15
#: The lowered sizes: the fixture's hot state (~1.7 KB) in pieces, its nodes in 4 parts.
HOT_INLINE, HOT_PIECE, NODE_VALUES = 400, 300, 10
#: Where a run's process dies in the batch it is given: it made durable the writes before the
#: index this returns (of the batch's writes) and nothing after; -1: every write, but not the
#: clean-up (the previous generation's pieces stay).
CrashPoint = Callable[[list[str]], int]


class CountingSampler:
    """Seeded labelled sampler that remembers every label it drew (to catch redraws)."""

    name = "insecure-seeded-numpy"
    secure = False

    def __init__(self, seed: int, drawn: list[str]) -> None:
        self.inner = InsecureSeededSampler(seed)
        self.drawn = drawn

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        self.drawn.append(label)
        return self.inner.discrete_laplace(scale, size, label=label)


@pytest.fixture(autouse=True)
def _small_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "HOT_INLINE_BYTES", HOT_INLINE)
    monkeypatch.setattr(chunks, "HOT_PIECE_BYTES", HOT_PIECE)
    monkeypatch.setattr(chunks, "NODE_PART_VALUES", NODE_VALUES)


def _records() -> tuple[list[InputRecord], list[float]]:
    lines = list(generate("county-admissions", PERIODS, 20.0, seed=4, spec=small_county_spec()))
    records = [
        InputRecord(SOURCE, 0, offset, SOURCE.encode(), line.text.encode())
        for offset, line in enumerate(lines)
    ]
    return records, arrivals_following(lines)


def _check_bounds(writes: list[StateWrite]) -> None:
    """Every hot state, piece, node and part within the bound of the sizes in force."""
    for write in writes:
        if write.value is None:
            continue
        size = chunks.encoded_size(write.value)
        if "|hot|" in write.key:
            assert size <= 2 * chunks.HOT_PIECE_BYTES + 2, write.key
        elif "|node|" in write.key or "|nodepart|" in write.key:
            assert size <= chunks.NODE_PART_VALUES * chunks.MAX_INT_BYTES + 2, write.key
        elif write.key == SOURCE:
            assert size <= chunks.HOT_INLINE_BYTES, write.key


def _check_restorable(state: dict[str, Any]) -> None:
    """The table as it is now can be loaded: every piece its hot-state head names and every
    part of each node head is there."""
    head = chunks.parse_hot_head(state.get(SOURCE))
    if head is not None:
        for p in range(head[1]):
            assert f"{SOURCE}|hot|{head[0]}|{p}" in state, f"piece {p} of {head} is gone"
    for key, value in state.items():
        if "|node|" in key and isinstance(value, dict):
            stem = key.replace("|node|", "|nodepart|", 1)
            assert all(f"{stem}|{p}" in state for p in range(value["parts"])), key


def _run(
    crashes: dict[int, CrashPoint], drawn: list[str], lost: list[str] | None = None
) -> tuple[dict[str, str], dict[str, Any], list[int]]:
    """Feed the records in batches (each followed by the clock's tick) to a service; at batch
    ``b`` in ``crashes`` the process dies where the crash point says, and a new service on the
    same table is given the same batch again (its records were never acknowledged). Returns
    what was published (key -> value, every re-publication equal), the table, and the batches
    whose checkpoints held both hot-state pieces and node parts; ``lost`` gets the sampler
    label of every node whose head a crash lost (never stored: it may be drawn again)."""
    spec = small_county_spec()
    records, arrivals = _records()
    state: dict[str, Any] = {}
    clock = [0.0]
    published: dict[str, str] = {}

    def service() -> ReleaseService:
        sampler = CountingSampler(5, drawn)
        return ReleaseService(
            spec, sampler=sampler, state=state, topics=TOPICS, clock=lambda: clock[0]
        )

    def publish(outcome: Any) -> None:
        for p in outcome.publications:
            if p.topic != TOPICS.dead_letter:
                key = f"{p.topic}/{p.key}"
                assert published.setdefault(key, p.value) == p.value, f"{key} changed"

    svc = service()
    wide: list[int] = []
    starts = list(range(0, len(records), BATCH))
    b = 0
    while b < len(starts):
        first = starts[b]
        clock[0] = arrivals[first]
        # the batch's checkpoint and the tick's, committed one after the other
        outcomes = [svc.process(records[first : first + BATCH]), svc.tick()]
        keys = [w.key for o in outcomes for w in o.writes]
        for o in outcomes:
            _check_bounds(o.writes)
        if any("|hot|" in k for k in keys) and any("|nodepart|" in k for k in keys):
            wide.append(b)
        crash = crashes.pop(b, None)
        cut = None if crash is None else crash(keys)
        if cut is not None and lost is not None and cut >= 0:
            lost += [_label(k) for k in keys[cut:] if "|node|" in k]
        done = 0
        for o in outcomes:
            if cut is not None and 0 <= cut < done + len(o.writes):
                apply_writes(state, o.writes[: cut - done])  # the crash, mid-checkpoint
                break
            apply_writes(state, o.writes)
            publish(o)
            if cut == -1 and o is outcomes[-1]:
                break  # the crash, before the last clean-up
            apply_writes(state, o.cleanup)
            _check_restorable(state)
            done += len(o.writes)
        _check_restorable(state)
        if cut is not None:
            svc = service()  # the same batch again: its records were never acknowledged
            continue
        b += 1
    clock[0] = release_instant(spec, PERIODS)
    while True:
        outcome = svc.tick()
        _check_bounds(outcome.writes)
        apply_writes(state, outcome.writes)
        publish(outcome)
        apply_writes(state, outcome.cleanup)
        if not svc.due():
            break
    return published, state, wide


def _label(node_key: str) -> str:
    """The sampler label of the node a node key names."""
    _, _, stream, epoch, t = node_key.split("|")
    return f"{stream}|e{epoch}|n{t}"


def _between_hot_pieces(keys: list[str]) -> int:
    """After the first piece of the last hot state written (its other pieces and head lost)."""
    last = max(i for i, k in enumerate(keys) if "|hot|" in k)
    generation = keys[last].split("|")[2]
    return keys.index(f"{SOURCE}|hot|{generation}|0") + 1


def _between_node_parts(keys: list[str]) -> int:
    """After the first part of the first wide node written (its other parts and head lost)."""
    return next(i for i, k in enumerate(keys) if "|nodepart|" in k) + 1


def _before_cleanup(keys: list[str]) -> int:
    return -1


@pytest.fixture(scope="module")
def uninterrupted() -> tuple[dict[str, str], list[int]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunks, "HOT_INLINE_BYTES", HOT_INLINE)
        patch.setattr(chunks, "HOT_PIECE_BYTES", HOT_PIECE)
        patch.setattr(chunks, "NODE_PART_VALUES", NODE_VALUES)
        drawn: list[str] = []
        published, _, wide = _run({}, drawn)
    assert len(drawn) == len(set(drawn))
    assert any(k.startswith(TOPICS.consistent) for k in published)
    assert len(wide) >= 3, "too few checkpoints cut both the hot state and nodes"
    return published, wide


def test_the_uninterrupted_run_publishes_what_unchunked_state_publishes(
    uninterrupted: tuple[dict[str, str], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunks, "HOT_INLINE_BYTES", 10**9)
    monkeypatch.setattr(chunks, "NODE_PART_VALUES", 10**9)
    published, state, wide = _run({}, [])
    assert wide == []
    assert not any("|hot|" in k or "|nodepart|" in k for k in state)
    assert published == uninterrupted[0]


@pytest.mark.parametrize(
    "crash", [_between_hot_pieces, _between_node_parts, _before_cleanup], ids=lambda f: f.__name__
)
def test_a_crash_between_records_of_a_wide_write_changes_nothing_published(
    uninterrupted: tuple[dict[str, str], list[int]], crash: CrashPoint
) -> None:
    expected, wide = uninterrupted
    drawn: list[str] = []
    lost: list[str] = []
    published, state, _ = _run({wide[0]: crash, wide[1]: crash}, drawn, lost)
    assert published == expected
    # only a node never stored (a crash cut its parts short) is drawn again, once a crash
    twice = sorted(label for label in set(drawn) if drawn.count(label) > 1)
    assert twice == sorted(lost), "a stored node was drawn again"
    assert all(drawn.count(label) == 2 for label in twice)
    if crash is _between_node_parts:
        assert lost, "no node was cut short: the test proves nothing"
    else:  # the nodes were stored whole before the crash: adopted, never drawn again
        assert lost == []
    head = chunks.parse_hot_head(state[SOURCE])
    generations = {parse_hot_piece_key(SOURCE, k) for k in state if "|hot|" in k}
    if head is None:
        assert generations == set()
    else:
        assert {g for g, _ in generations if g is not None} == {head[0]}
        assert len(generations) == head[1]


def test_a_restart_reads_the_generation_its_head_names_after_a_torn_one(
    uninterrupted: tuple[dict[str, str], list[int]],
) -> None:
    """The torn generation's pieces are left in the table by the crash; the restarted worker
    reads the previous generation, writes its next one above the torn one, and deletes both."""
    wide = uninterrupted[1]
    seen: dict[str, Any] = {}

    def crash_and_look(keys: list[str]) -> int:
        cut = _between_hot_pieces(keys)
        seen["torn"] = int(keys[cut - 1].split("|")[2])
        return cut

    published, state, _ = _run({wide[0]: crash_and_look}, [])
    assert published == uninterrupted[0]
    head = chunks.parse_hot_head(state[SOURCE])
    assert head is not None
    assert head[0] > seen["torn"]
    assert not any(k.startswith(f"{SOURCE}|hot|{seen['torn']}|") for k in state)


@pytest.mark.parametrize("where", ["half-writes", "mid-writes", "before-ack"])
def test_k_ary_noise_rows_wider_than_a_chunk_are_stored_as_segments_and_restored(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A k-ary stream whose noise rows (5 counters) are wider than a noise chunk (3 values, as
    a 10^5-counter row is at the production size) stores them as segments; crashes anywhere in
    the protocol change no published value and redraw no stored noise."""
    scenario = "restaurant+kary_gls"
    records, arrivals = protocol._records(scenario, periods=20, rate=5)
    final = release_instant(protocol._spec(scenario), 20)
    monkeypatch.setattr(checkpoint, "NOISE_CHUNK_VALUES", 3)
    written: list[Any] = []

    def noise_chunks(noise: Any) -> list[Any]:
        made = checkpoint.noise_chunks(noise)
        written.extend(made)
        return made

    monkeypatch.setattr(writer, "noise_chunks", noise_chunks)
    clean, clean_drawn = protocol._run(
        scenario, records, arrivals, batch=9, crash_plan={}, final=final
    )
    plan = dict.fromkeys(range(1, 200, 4), where)
    crashed, drawn = protocol._run(
        scenario, records, arrivals, batch=9, crash_plan=plan, final=final
    )
    assert crashed == clean
    assert written, "no epoch noise was written: the test proves nothing"
    assert all(c.keys() == {"width", "values"} and len(c["values"]) <= 3 for c in written)
    assert set(drawn) == set(clean_drawn)
    if where != "half-writes":  # only draws never stored may repeat
        assert len(drawn) == len(set(drawn)), "stored noise was drawn again"
