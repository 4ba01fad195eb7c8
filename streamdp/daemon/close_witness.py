"""The input group's witness of the periods closed: commit metadata that a restored state copy
cannot take back.

A source's stored state must not be behind what was published from it: resuming an older copy
would close published periods again with new noise (two draws of one node). Input offsets catch
a copy that missed committed records (:mod:`streamdp.daemon.resume_check`), but not one that
only missed closes made by the public clock while no record arrived: its applied offsets are
the group's. So every commit of an input partition carries, in its Kafka commit metadata, how
many periods each source homed on it has closed (summed over the source's streams) as of its
last durable checkpoint; the group's commits live in ``__consumer_offsets``, apart from the
state changelog a restore replaces. A worker loading a source compares the stored state's
closes with the witness the group holds and refuses a state that closed fewer.

The witness is never ahead of the durable state: it counts only closes whose checkpoint is
acknowledged (a tick's, awaited before the next step; a loaded source's, read from the table),
and a worker sets it at every tick once its sources are loaded, so after a rebalance or a
restart the next owner writes it again. It lags by a commit interval: a copy missing only the
closes of the last second or so before a commit (or before a crash or a rebalance that kept
them from being committed, until the next owner's first tick) is not caught. Closes
depend on the public clock alone, so the witness holds nothing derived from records; it is
still protected state, like every commit. Metadata written by another program (not
:data:`PREFIX`) is no witness.

Where the group has committed nothing for a partition (a source that never received a record),
the witness is committed at offset 0. That reads as no commit for the offset check, and the
consumer's reset to the log start is where a missing commit would have put the reader anyway;
a commit above 0 is never moved back to it (:func:`streamdp.faust_internals.witness_metadata`
asks the broker first).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from streamdp.daemon.state_chunks import RESTORE_ADVICE
from streamdp.errors import StateError

log = logging.getLogger("streamdp.daemon")

#: The start of a witness in commit metadata (the rest is JSON: source -> periods closed).
PREFIX = "streamdp-closed:"
#: The longest witness written, in bytes: brokers refuse commit metadata longer than
#: ``offset.metadata.max.bytes`` (4,096 by default), and a refused commit would stop the worker.
MAX_WITNESS_BYTES = 3_000


#: the source sets whose witness was too long, each warned about once
_TOO_LONG: set[tuple[str, ...]] = set()


def witness_text(closed: Mapping[str, int]) -> str:
    """The commit metadata witnessing ``closed`` (source -> periods closed over its streams);
    empty when there is nothing to witness or the text would pass :data:`MAX_WITNESS_BYTES`
    (then logged once: those sources' restores are checked by input offsets alone)."""
    if not closed:
        return ""
    text = PREFIX + json.dumps(dict(sorted(closed.items())), separators=(",", ":"))
    if len(text.encode()) > MAX_WITNESS_BYTES:
        sources = tuple(sorted(closed))
        if sources in _TOO_LONG:
            return ""
        _TOO_LONG.add(sources)
        log.warning(
            "the close witness of sources %s would be %d bytes, more than the %d commit "
            "metadata may hold: not written (a restored state of these sources is checked "
            "against committed input offsets only)",
            ", ".join(sorted(closed)),
            len(text.encode()),
            MAX_WITNESS_BYTES,
        )
        return ""
    return text


def witnessed_closes(metadata: str | None) -> dict[str, int]:
    """The closes a commit's ``metadata`` witnesses (source -> periods closed); empty for no
    metadata, another program's, or a malformed witness."""
    if not metadata or not metadata.startswith(PREFIX):
        return {}
    try:
        parsed = json.loads(metadata[len(PREFIX) :])
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {
        str(source): n
        for source, n in parsed.items()
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0
    }


def check_closes(
    source: str, topic: str, partition: int, *, witnessed: int, stored: int | None
) -> None:
    """Raise :class:`StateError` unless the stored state of ``source`` (None: none), which
    closed ``stored`` periods over its streams, closed at least the ``witnessed`` the group's
    commit of ``topic[partition]`` says were closed and made durable."""
    closed = 0 if stored is None else stored
    if witnessed <= closed:
        return
    held = "holds none" if stored is None else f"closed {closed}"
    raise StateError(
        f"source {source!r}: the input group's commit of {topic}[{partition}] witnesses "
        f"{witnessed} periods closed and published, but the stored state {held}: the state "
        "topic was lost, truncated or restored from an older copy, and starting from it "
        f"would release published periods again with new noise. "
        f"{RESTORE_ADVICE[0].upper()}{RESTORE_ADVICE[1:]}"
    )


class CloseWitnesses:
    """The witnesses one worker writes and reads, per input partition ``(topic, partition)``:
    ``to_write`` the latest made durable by this worker (written with the partition's next
    commit), ``on_broker`` the group's as last read at an assignment's seek or written by an
    accepted commit. The Kafka adapter writes and reads them (:mod:`streamdp.faust_internals`);
    the batch driver sets ``to_write`` after a tick's checkpoint."""

    def __init__(self) -> None:
        self.to_write: dict[tuple[str, int], str] = {}
        self.on_broker: dict[tuple[str, int], str] = {}

    def metadata_for(self, topic: str, partition: int, default: str) -> str:
        """What a commit of ``topic[partition]`` writes: this worker's latest witness, else the
        group's as read (a commit never erases a witness), else ``default``."""
        key = (topic, partition)
        # single reads (the consumer's thread reads while the worker's loop writes)
        written = self.to_write.get(key)
        if written is not None:
            return written
        return self.on_broker.get(key, default)

    def pending(self, topic: str, partition: int) -> bool:
        """Whether this worker's witness of ``topic[partition]`` is not yet on the broker."""
        key = (topic, partition)
        written = self.to_write.get(key)
        return written is not None and written != self.on_broker.get(key)

    def witnessed(self, topic: str, partition: int) -> dict[str, int]:
        """The closes the group's commit of ``topic[partition]`` witnesses, as last read."""
        return witnessed_closes(self.on_broker.get((topic, partition)))

    def note(self, closed: Mapping[tuple[str, int], Mapping[str, int]]) -> list[tuple[str, int]]:
        """Take ``closed`` (per input partition, the durable closes of each source homed
        there) as this worker's witnesses; returns the partitions whose witness changed (to be
        written with their next commit)."""
        changed = []
        for key, sources in closed.items():
            text = witness_text(sources)
            if text and self.to_write.get(key) != text:
                self.to_write[key] = text
                changed.append(key)
        return changed

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Drop what this worker would write for ``partitions`` (revoked: their next owner
        writes its own)."""
        for key in partitions:
            self.to_write.pop(key, None)

    def keep_only(self, partitions: set[tuple[str, int]]) -> None:
        """Drop what this worker would write for any partition but ``partitions`` (its new
        assignment)."""
        self.forget(set(self.to_write) - partitions)
