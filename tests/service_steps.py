"""A worker's two steps on the release service, as the tests drive them: an input batch (which
only reads the clock) followed by the public clock's tick at the same reading (which closes
what is due), with their outcomes in one, in the order the worker commits them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.service import ReleaseService


def apply_writes(state: dict[str, Any], writes: Iterable[Any]) -> None:
    """Apply state writes to a dict table as a JSON changelog keeps them (None deletes)."""
    for w in writes:
        if w.value is None:
            state.pop(w.key, None)
        else:
            state[w.key] = json.loads(json.dumps(w.value))


def merged(first: BatchOutcome, then: BatchOutcome) -> BatchOutcome:
    """``first`` and ``then`` as one outcome, ``first``'s writes, publications and cleanup
    before ``then``'s (the order the worker commits them in)."""
    return BatchOutcome(
        writes=first.writes + then.writes,
        publications=first.publications + then.publications,
        cleanup=first.cleanup + then.cleanup,
        releases=first.releases + then.releases,
        revisions=first.revisions + then.revisions,
        dead_letters=first.dead_letters + then.dead_letters,
        periods_closed={**first.periods_closed, **then.periods_closed},
        revision_stats={**first.revision_stats, **then.revision_stats},
        skipped=first.skipped + then.skipped,
        accepted=first.accepted + then.accepted,
        released_at=then.released_at if then.released_at is not None else first.released_at,
    )


def process_and_tick(service: ReleaseService, batch: Sequence[Any]) -> BatchOutcome:
    """``service.process(batch)`` then ``service.tick()`` at the clock's reading."""
    return merged(service.process(batch), service.tick())


def batch_then_tick(service: ReleaseService, batch: Sequence[Any]) -> list[BatchOutcome]:
    """The two checkpoints of :func:`process_and_tick` apart: the batch's, then the tick's
    when it closed anything."""
    ticked = (service.process(batch), service.tick())
    return [ticked[0], *(o for o in ticked[1:] if o.writes)]
