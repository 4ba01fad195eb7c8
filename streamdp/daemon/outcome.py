"""What one batch of the release service produced, in the order the adapter must follow:
``writes`` made durable first, then ``publications`` sent, then ``cleanup`` written (see
:mod:`streamdp.daemon.service` and the commit protocol, :mod:`streamdp.daemon.commit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdp.engine import ConsistentRecord, DeadLetterRecord, ReleaseRecord


@dataclass(frozen=True)
class StateWrite:
    """Set (``value`` not None) or delete one key of the state table, on ``partition``."""

    partition: int
    key: str
    value: Any | None


@dataclass(frozen=True)
class Publication:
    """One output record to send: ``topic``, ``key`` and JSON ``value`` (UTF-8 text)."""

    topic: str
    key: str
    value: str


@dataclass
class BatchOutcome:
    """What a batch produced; see the module docstring for the order the adapter must follow."""

    writes: list[StateWrite] = field(default_factory=list)
    publications: list[Publication] = field(default_factory=list)
    cleanup: list[StateWrite] = field(default_factory=list)
    releases: list[ReleaseRecord] = field(default_factory=list)
    revisions: list[ConsistentRecord] = field(default_factory=list)
    dead_letters: list[DeadLetterRecord] = field(default_factory=list)
    skipped: int = 0
    accepted: int = 0
