"""The native fast path of the per-record path: ordinary order records counted without Python
decoding them.

:class:`~streamdp.engine._order_scanner.OrderScanner` (C, built at install when a C compiler is
present) reads an order record in its everyday shape in one pass and answers its event time,
content key and item quantities, exactly what :func:`~streamdp.engine.events.decode`,
:func:`~streamdp.engine.periods.parse_instant` and
:func:`~streamdp.engine.raw_records.content_key` would make of the same bytes; for anything
else (another shape, an escape, an unknown item, a source it was not built with) it declines
and the Python path reads the record and decides. The scanner never refuses a record.

:class:`ScannedSource` then counts a scanned record only when every stream of its source
accepts it (its contribution, the acceptance window and the duplicate check, the same code the
Python path runs); when any stream would refuse it, nothing is changed and the Python path
handles the record, dead letters and all. So the two paths differ in speed only: a property
test holds the engine's state, outputs and statistics equal with the scanner and without it,
on generated, mutated and hostile records.

Only sources whose streams all count items (``counters.kind = "items"``) are scanned; the
other kinds, and every source when the native module was not built, take the Python path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from streamdp.engine.events import Contribution, RejectedError
from streamdp.engine.open_periods import OpenPeriods
from streamdp.engine.periods import EARLIEST_INSTANT, LATEST_INSTANT
from streamdp.engine.spec import SourceSpec
from streamdp.engine.stream import StreamRuntime

Scan = Callable[[bytes], "tuple[float, str, tuple[int, ...]] | None"]

_scanner_type: type | None
try:
    from streamdp.engine import _order_scanner  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install: every record takes the Python path
    _scanner_type = None
else:
    _scanner_type = _order_scanner.OrderScanner

#: True when the native scanner was built (see the README: a C compiler at install).
NATIVE_SCANNER_BUILT: Final = _scanner_type is not None

#: Distinct quantity vectors whose contribution is remembered per stream (orders repeat a few
#: combos; past this, contributions are worked out each time, still exactly).
CONTRIBUTION_CACHE_SIZE: Final = 4096

# a cached "this stream refuses these quantities" (compared by identity)
_REFUSED: Final[Contribution] = ((-1, -1),)


class _ScannedStream:
    """One stream of a scanned source: its open periods and the contributions of quantity
    vectors already met (its extractor's answer, worked out once)."""

    def __init__(self, runtime: StreamRuntime, item_names: Sequence[str]) -> None:
        self.periods: OpenPeriods = runtime.periods
        self._extractor = runtime.periods.extractor
        self._item_names = tuple(item_names)
        self._contributions: dict[tuple[int, ...], Contribution] = {}

    def contribution(self, quantities: tuple[int, ...]) -> Contribution | None:
        """The stream's contribution of an order with these quantities (-1: item not named),
        or None when the stream refuses it (the Python path then says why)."""
        known = self._contributions.get(quantities)
        if known is None:
            items = {
                name: quantity
                for name, quantity in zip(self._item_names, quantities, strict=True)
                if quantity >= 0
            }
            try:
                known = self._extractor.contribution({"items": items})
            except RejectedError:
                known = _REFUSED
            if len(self._contributions) < CONTRIBUTION_CACHE_SIZE:
                self._contributions[quantities] = known
        return None if known is _REFUSED else known


class ScannedSource:
    """The fast path of one source's records (see the module docstring)."""

    def __init__(self, source: SourceSpec, runtimes: Sequence[StreamRuntime]) -> None:
        if _scanner_type is None:
            raise RuntimeError("the native order scanner is not built")
        item_names: list[str] = []
        for runtime in runtimes:
            for name in runtime.spec.counters.items:
                if name not in item_names:
                    item_names.append(name)
        scanner = _scanner_type(
            (source.name, source.topic), tuple(item_names), EARLIEST_INSTANT, LATEST_INSTANT
        )
        self.scan: Scan = scanner.scan
        self._streams = [_ScannedStream(runtime, item_names) for runtime in runtimes]
        self._only = self._streams[0] if len(self._streams) == 1 else None

    def count(self, ts: float, key: str, quantities: tuple[int, ...]) -> bool:
        """Count a scanned record (event time ``ts``, content key ``key``) in every stream of
        the source; False, changing nothing, when any stream would refuse it."""
        only = self._only
        if only is not None:  # one stream: the loop below, unrolled (a third of a scanned
            # record's cost in A/B runs: 2.5-2.9 us per record with it, 3.6-4.0 without)
            contribution = only.contribution(quantities)
            if contribution is None:
                return False
            j = only.periods.admits(ts, key)
            if j is None:
                return False
            only.periods.count(j, key, contribution)
            return True
        placed: list[tuple[OpenPeriods, int, Contribution]] = []
        for stream in self._streams:
            contribution = stream.contribution(quantities)
            if contribution is None:
                return False
            j = stream.periods.admits(ts, key)
            if j is None:
                return False
            placed.append((stream.periods, j, contribution))
        for periods, j, contribution in placed:
            periods.count(j, key, contribution)
        return True


def scanned_sources(
    sources: Sequence[SourceSpec], by_source: dict[str, list[StreamRuntime]]
) -> dict[str, ScannedSource]:
    """The fast path of every source that has one, by input topic: sources with streams, all
    of which count items and protect one event (a privacy unit's field is read by the Python
    path), when the native scanner is built."""
    if _scanner_type is None:
        return {}
    scanned: dict[str, ScannedSource] = {}
    for source in sources:
        runtimes = by_source.get(source.name, [])
        if runtimes and all(
            r.spec.counters.kind == "items" and r.spec.privacy_unit is None for r in runtimes
        ):
            scanned[source.topic] = ScannedSource(source, runtimes)
    return scanned
