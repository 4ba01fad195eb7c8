"""Input offsets that hold no record to deliver, as the Kafka client found them.

The release service refuses a hole in a partition's input offsets (an offset that jumps past
the last one applied): that is how it notices records a reader dropped (faust-streaming's
fetch drop, docs/operating.md section 4) before anything is acknowledged. Some offsets hold no
record by Kafka's own design, and the client passes over them while reading a fetch: the
commit and abort markers of a transaction (control batches, one offset each), and records
removed by compaction inside a batch. A hole made only of such offsets loses nothing, and
refusing it would let one producer that writes a transaction stop the worker, and with it
every release.

:class:`SkippedOffsets` keeps, per partition, the offset ranges the client passed over
(:func:`streamdp.faust_internals.note_skipped_offsets` feeds it from the client's reading of
each fetch). A hole is accepted when every offset in it is one of them; offsets the client
delivered and a reader then lost are never in it, so those holes still stop the batch.
"""

from __future__ import annotations

import bisect
import threading

__all__ = ["MAX_RANGES_PER_PARTITION", "SkippedOffsets"]

#: Ranges kept per partition at most (oldest dropped first), a bound on memory only: the
#: ranges below a hole asked about are dropped then (:meth:`SkippedOffsets.covers`), so those
#: kept are the ones of fetches not yet processed. It is above what one fetch can hold (a 4 MiB
#: fetch of one-record transactions holds fewer than 30,000 markers): with 4,096, one producer
#: writing small transactions could fill a fetch with more markers than were kept, the first
#: holes would be taken for lost records and the worker would stop at the same place after
#: every restart (audit of 2026-11-28).
MAX_RANGES_PER_PARTITION = 65_536


class SkippedOffsets:
    """Per (topic, partition), merged half-open ranges ``[start, stop)`` of offsets the client
    passed over without a record to deliver. Thread-safe: Faust's consumer thread adds, the
    release service (on the worker's event loop) asks."""

    __slots__ = ("_lock", "_ranges")

    def __init__(self) -> None:
        self._ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._lock = threading.Lock()

    def add(self, topic: str, partition: int, start: int, stop: int) -> None:
        """Offsets ``start`` to ``stop - 1`` of ``topic[partition]`` hold no record."""
        if stop <= start:
            return
        with self._lock:
            self._add(self._ranges.setdefault((topic, partition), []), start, stop)

    @staticmethod
    def _add(ranges: list[tuple[int, int]], start: int, stop: int) -> None:
        i = bisect.bisect_left(ranges, (start, stop))
        if i > 0 and ranges[i - 1][1] >= start:  # touches or overlaps the one before
            i -= 1
            start = ranges[i][0]
        j = i
        while j < len(ranges) and ranges[j][0] <= stop:  # and every one it reaches after
            stop = max(stop, ranges[j][1])
            j += 1
        ranges[i:j] = [(start, stop)]
        if len(ranges) > MAX_RANGES_PER_PARTITION:
            del ranges[: len(ranges) - MAX_RANGES_PER_PARTITION]

    def covers(self, topic: str, partition: int, start: int, stop: int) -> bool:
        """True when every offset from ``start`` to ``stop - 1`` is a skipped one. The hole
        asked about starts after the last offset applied: the ranges that end before it are
        no longer needed and are dropped (a partition read again after a rebalance has its
        fetches read, and their ranges noted, again)."""
        if stop <= start:
            return True
        with self._lock:
            ranges = self._ranges.get((topic, partition))
            if not ranges:
                return False
            done = 0  # the ranges are disjoint and sorted: those ending by ``start`` lead
            while done < len(ranges) and ranges[done][1] <= start:
                done += 1
            del ranges[:done]
            i = bisect.bisect_right(ranges, (start, float("inf"))) - 1
            return i >= 0 and ranges[i][0] <= start and stop <= ranges[i][1]
