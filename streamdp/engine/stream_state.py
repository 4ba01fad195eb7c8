"""The JSON layout of one stream's state: writing it, reading it back, and the checks that a
state read back fits the stream.

The state holds raw counts (the open periods' true counts, the counter's pending node sums):
it must be stored like the input topic. The daemon leaves out what it stores incrementally
(event ids, epoch noise, noisy nodes) so that the rest costs the same however long the history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank import CounterBank, restore_bank
from streamdp.engine.spec import StreamSpec
from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler

# 2: "seen" holds content digests of the open periods' records (1: event ids) and
# "close_target" an operator's pending close; version 1 states restore (their ids stay as
# opaque entries that match no digest)
STREAM_STATE_VERSION = 2
_RESTORABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class StreamState:
    """One stream's state, as written by :func:`encode_stream_state` and read back by
    :func:`decode_stream_state` (``seen`` and ``past_nodes`` only when written with them)."""

    stream: str
    closed: int
    close_target: int
    revised_through: int
    revision: int
    open: dict[int, list[int]]
    seen: dict[int, set[str]]
    counter: CounterBank
    past_nodes: list[npt.NDArray[np.int64]]
    # (first epoch held, consistent total carried into it) once earlier epochs were retired
    retired_carry: tuple[int, npt.NDArray[np.float64]] | None = None


def encode_stream_state(
    state: StreamState,
    node_counts: list[list[int]],
    *,
    with_seen: bool,
    with_noise: bool,
    with_nodes: bool,
) -> dict[str, Any]:
    """Plain JSON-able state. Holds raw counts: protect it like the input topic.

    With ``with_seen=False`` the event ids of the open periods are left out (the daemon
    stores them incrementally, from :meth:`StreamRuntime.seen_ids`); restoring needs them back
    under ``"seen"``. With ``with_noise=False`` a k-ary counter's epoch noise is left out (the
    daemon stores it once per epoch, from :meth:`StreamRuntime.epoch_noise`); restoring needs
    it back under ``counter.node_noise``. With ``with_nodes=False`` the noisy nodes
    (``past_nodes`` and the counter's ``noisy_nodes``) are left out and ``node_counts`` (runs
    ``[first epoch, nodes per epoch, epochs]``) says how many there are: the daemon stores each
    node once, from :meth:`StreamRuntime.take_new_nodes`; restoring needs them back in place of
    ``node_counts``. Without nodes, seen ids and noise the state's cost does not grow with the
    history."""
    out: dict[str, Any] = {
        "version": STREAM_STATE_VERSION,
        "stream": state.stream,
        "closed": state.closed,
        "close_target": state.close_target,
        "revised_through": state.revised_through,
        "revision": state.revision,
        "open": [[j, list(row)] for j, row in sorted(state.open.items())],
        "counter": state.counter.state(with_noise=with_noise, with_nodes=with_nodes),
    }
    if state.retired_carry is not None:
        # float64 values as JSON numbers (shortest repr: read back bit for bit)
        epoch, carry = state.retired_carry
        out["retired_carry"] = [epoch, carry.tolist()]
    if with_nodes:
        out["past_nodes"] = [nodes.tolist() for nodes in state.past_nodes]
    else:
        out["node_counts"] = node_counts
    if with_seen:
        out["seen"] = [[j, sorted(ids)] for j, ids in sorted(state.seen.items())]
    return out


def counters_digest(names: Sequence[str]) -> str:
    """SHA-256 of the counter names in vector order, as a JSON list (unambiguous whatever a
    name holds): a state remembers the layout its rows were written in, which the
    configuration's fingerprint does not cover (the code lays the counters out)."""
    text = json.dumps(list(names), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def decode_stream_state(
    data: Mapping[str, Any],
    spec: StreamSpec,
    sampler: NoiseSampler,
    projection: npt.NDArray[np.float64] | None,
    *,
    needs_carry: bool = False,
    counters_sha256: str | None = None,
) -> StreamState:
    """Read :func:`encode_stream_state` output written with seen ids, noise and nodes (no noise
    is drawn); raises :class:`StateError` if it is malformed or does not fit ``spec``.
    ``needs_carry``: the stream's revisions read past epochs (Fenwick), so epochs retired
    before the oldest one held must have left their carry."""
    written = data.get("counters_sha256")  # absent: a state from before it was written
    expected = counters_sha256 or counters_digest(spec.counters.names)
    if written is not None and written != expected:
        raise StateError(
            f"stream {spec.name!r}: its state was written with its counters in another order "
            "(another streamdp version, or another places or attributes layout): restoring "
            "would put counts under the wrong counters; restore with the version that wrote it"
        )
    width = len(spec.counters.names)
    try:
        if data.get("version") not in _RESTORABLE_VERSIONS or data.get("stream") != spec.name:
            raise StateError(
                f"state is for stream {data.get('stream')!r} version "
                f"{data.get('version')!r}; expected {spec.name!r} version "
                f"{STREAM_STATE_VERSION}"
            )
        try:
            counter = restore_bank(dict(data["counter"]), sampler, projection=projection)
        except StateError as error:  # the counter's own words, with the stream named
            raise StateError(f"stream {spec.name!r}: {error}") from None
        open_ = {int(j): [int(v) for v in row] for j, row in data["open"]}
        seen = {int(j): {str(i) for i in ids} for j, ids in data["seen"]}
        past = [np.asarray(n, dtype=np.int64).reshape(-1, width) for n in data["past_nodes"]]
        closed = int(data["closed"])
        close_target = int(data.get("close_target", 0))
        revised_through = int(data.get("revised_through", 0))
        revision = int(data["revision"])
        try:
            retired_carry = _retired_carry(data.get("retired_carry"), width)
        except StateError as error:
            raise StateError(f"stream {spec.name!r}: {error}") from None
    except StateError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise StateError(
            f"stream {spec.name!r}: snapshot state is malformed ({type(error).__name__})"
        ) from None
    if any(len(row) != width for row in open_.values()) or set(open_) != set(seen):
        raise StateError(f"stream {spec.name!r}: open-period state has the wrong shape")
    if counter.width != width or counter.horizon != spec.horizon:
        raise StateError(f"stream {spec.name!r}: counter state does not match the spec")
    if counter.epoch * spec.horizon + counter.periods_closed != closed:
        raise StateError(f"stream {spec.name!r}: closed-period count is inconsistent")
    oldest = counter.epoch - len(past)
    if retired_carry is not None and retired_carry[0] != oldest:
        raise StateError(
            f"stream {spec.name!r}: the kept carry is for epoch {retired_carry[0]}, not the "
            f"oldest epoch held ({oldest})"
        )
    if needs_carry and oldest > 0 and retired_carry is None:
        raise StateError(
            f"stream {spec.name!r}: epochs before {oldest} were retired but the state keeps no "
            "carry for them"
        )
    return StreamState(
        stream=spec.name,
        closed=closed,
        close_target=close_target,
        revised_through=revised_through,
        revision=revision,
        open=open_,
        seen=seen,
        counter=counter,
        past_nodes=past,
        retired_carry=retired_carry,
    )


def _retired_carry(value: Any, width: int) -> tuple[int, npt.NDArray[np.float64]] | None:
    """``[epoch, [width floats]]`` as written by :func:`encode_stream_state` (None: absent)."""
    if value is None:
        return None
    epoch, values = value
    carry = np.asarray([float(v) for v in values], dtype=np.float64)
    if int(epoch) < 1 or carry.shape != (width,) or not np.all(np.isfinite(carry)):
        raise StateError(
            f"retired_carry must be [epoch >= 1, {width} finite numbers], got epoch {epoch!r} "
            f"and {carry.shape[0]} numbers"
        )
    return int(epoch), carry


#: Counter state not compared with a fresh counter's: what changes as periods close, the
#: sampler (its security is checked on restore), and what an optimiser chose for the spec (the
#: k-ary level budgets, the BLT lattice), which a numpy or scipy upgrade may move by an ulp while
#: the stored values stay valid (their privacy is checked where they are read: budgets sum to
#: at most 1 exactly, the lattice's own sensitivity sets its noise).
_NOT_COMPARED = frozenset(
    {
        "block_start", "carry", "carry_rounding", "carry_variance", "decode", "encode", "epoch",
        "exact_total", "node_noise", "noise_drawn", "noisy_nodes", "pending", "periods_closed",
        "sampler", "total", "version",
        "budgets", "lattice",
    }
)  # fmt: skip


def check_counter_parameters(stream: str, stored: Any, expected: Any, path: str = "") -> None:
    """Refuse a stored counter whose privacy parameters (epsilon, rho, sensitivity, mechanism,
    noise label, level shares, ...) differ from those the spec gives a fresh counter (``expected``:
    its state): restoring would release with the stored ones while every record, the ledger
    and the planner state the spec's. Progress (carries, pending sums, noise) is not compared;
    the sampler's security is checked on restore. :class:`StateError` naming the field."""
    if isinstance(expected, dict):
        if not isinstance(stored, dict):
            raise StateError(
                f"stream {stream!r}: stored counter field {path or 'state'!r} is malformed"
            )
        for key, value in expected.items():
            if key not in _NOT_COMPARED:
                check_counter_parameters(
                    stream, stored.get(key), value, f"{path}.{key}".lstrip(".")
                )
        return
    if isinstance(expected, list) and expected and isinstance(expected[0], dict):
        if not isinstance(stored, list) or len(stored) != len(expected):
            raise StateError(f"stream {stream!r}: stored counter field {path!r} is malformed")
        for i, (got, want) in enumerate(zip(stored, expected, strict=True)):
            check_counter_parameters(stream, got, want, f"{path}[{i}]")
        return
    if stored != expected:
        raise StateError(
            f"stream {stream!r}: the stored counter's {path} differs from the spec's; refusing "
            "to restore (its releases would not have the privacy parameters the spec states)"
        )
