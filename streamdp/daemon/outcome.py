"""What one batch of the release service (:mod:`streamdp.daemon.service`) produced, in the
order the adapter (the commit protocol, :mod:`streamdp.daemon.commit`) must follow:

1. ``writes``: table entries (hot state, new noisy nodes, a k-ary epoch's noise, outbox records)
   the adapter must make durable (changelog delivery acknowledged) FIRST;
2. ``publications``: output records to send, only after step 1;
3. ``cleanup``: outbox deletions to write once the publications are acknowledged.

Only then may the adapter acknowledge the input records (so their offsets get committed).
A crash anywhere in between is safe: input re-delivered after the last durable checkpoint is
skipped by the engine's applied offsets (stored in the checkpoint), and a pending outbox is
published again when the source is next loaded (same keys, same values). Noise is drawn in
memory and published only after it is stored; noise lost in a crash was never published, and
a node stored by a checkpoint that never completed is reused when its period closes again, so
no stored node is drawn twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdp.engine import ConsistentRecord, DeadLetterRecord, ReleaseRecord
from streamdp.engine.stream_revisions import RevisionStats


@dataclass(frozen=True)
class StateWrite:
    """Set (``value`` not None) or delete one key of the state table, on ``partition``."""

    partition: int
    key: str
    value: Any | None


@dataclass(frozen=True)
class Publication:
    """One output record to send: ``topic``, ``key`` and JSON ``value`` (UTF-8 text);
    ``timestamp``: its Kafka timestamp (Unix seconds), the public instant of a tick's release
    or revision (None: the producer's send time; dead letters)."""

    topic: str
    key: str
    value: str
    timestamp: float | None = None


@dataclass
class BatchOutcome:
    """What a batch produced; see the module docstring for the order the adapter must follow."""

    writes: list[StateWrite] = field(default_factory=list)
    publications: list[Publication] = field(default_factory=list)
    cleanup: list[StateWrite] = field(default_factory=list)
    releases: list[ReleaseRecord] = field(default_factory=list)
    revisions: list[ConsistentRecord] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    # per stream of the sources the batch touched: periods closed after it, and the
    # diagnostics of its latest revision if it made one (for metrics: read, never sent)
    periods_closed: dict[str, int] = field(default_factory=dict)
    revision_stats: dict[str, RevisionStats] = field(default_factory=dict)
    skipped: int = 0
    accepted: int = 0
    # records dropped beyond a privacy unit's bounds, per stream (protected metrics only)
    unit_drops: dict[str, int] = field(default_factory=dict)
    # a tick's outcome: the wall-clock instant (Unix seconds) its releases are published as,
    # set by the clock alone (None: an input batch's outcome, which never releases)
    released_at: float | None = None
