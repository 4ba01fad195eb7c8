"""Whether a source's stored state may be resumed: it must not be behind the input group.

The group commits a record of a source's home partition only after the checkpoint that applied
it is durable (:mod:`streamdp.daemon.commit`), so the next offset the group will read is at most
one past the last offset the stored state applied. A state behind that was lost, truncated or
restored from an older copy: resuming it would close periods already published again, with new
noise (two draws of one node, whose average halves its variance), and never count the records
in between. The check reads offsets, which count records (input volume): its message names
none.
"""

from __future__ import annotations

from streamdp.daemon.state_chunks import RESTORE_ADVICE
from streamdp.errors import StateError


def check_resume(
    source: str, topic: str, partition: int, *, committed: int, applied: int | None
) -> None:
    """Raise :class:`StateError` unless the state that applied offsets up to ``applied`` (None:
    none) of ``topic[partition]`` has applied every record below the group's ``committed``
    offset (the next offset to read; 0: nothing committed)."""
    if committed <= (0 if applied is None else applied + 1):
        return
    stored = "holds none" if applied is None else "is behind them"
    raise StateError(
        f"source {source!r}: the input group has committed records of {topic}[{partition}] but "
        f"the stored state {stored}: the state topic was lost, truncated or restored from an "
        "older copy, and starting from it would release published periods again with new "
        f"noise. {RESTORE_ADVICE[0].upper()}{RESTORE_ADVICE[1:]}"
    )
